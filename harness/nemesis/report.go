package nemesis

import (
	"fmt"
	"html"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// measure fills each fault's longest write gap from the blind log: the
// longest stretch from its start to its recovery with no write at all.
func measure(faults []Fault, recs []Record) {
	times := make([]time.Time, len(recs))
	for i, r := range recs {
		times[i] = r.Time
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := range faults {
		f := &faults[i]
		lo := sort.Search(len(times), func(k int) bool { return !times[k].Before(f.Start) })
		prev := f.Start
		var gap time.Duration
		for k := lo; k < len(times) && !times[k].After(f.Recovered); k++ {
			gap = max(gap, times[k].Sub(prev))
			prev = times[k]
		}
		f.Gap = max(gap, f.Recovered.Sub(prev))
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func dur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// summarize renders the availability table per fault kind and the checks.
func summarize(res *Result, in checkInput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis: seed %d, %d nodes, %d faults in %v, lease %v\n", res.Seed, res.Nodes, len(res.Faults),
		res.Duration.Round(time.Second), res.Lease)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tfaults\ttakeovers\ttakeover p50\ttakeover max\tlongest gap\tgap p50\trecovery p50\tblocked\tstuck\t")
	type agg struct {
		n, takeovers, blocked, stuck int
		tk, gaps, rec                []time.Duration
	}
	byKind := map[string]*agg{}
	all := &agg{}
	for _, f := range res.Faults {
		a := byKind[f.Kind]
		if a == nil {
			a = &agg{}
			byKind[f.Kind] = a
		}
		for _, x := range []*agg{a, all} {
			x.n++
			if f.Takeover > 0 {
				x.takeovers++
				x.tk = append(x.tk, f.Takeover)
			}
			x.gaps = append(x.gaps, f.Gap)
			if !f.Healed.IsZero() && f.Recovered.After(f.Healed) {
				x.rec = append(x.rec, f.Recovered.Sub(f.Healed))
			}
			if f.Blocked {
				x.blocked++
			}
			if f.Stuck != "" {
				x.stuck++
			}
		}
	}
	row := func(name string, a *agg) {
		mx := func(ds []time.Duration) time.Duration {
			var m time.Duration
			for _, d := range ds {
				m = max(m, d)
			}
			return m
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", name, a.n, a.takeovers, dur(median(a.tk)), dur(mx(a.tk)),
			dur(mx(a.gaps)), dur(median(a.gaps)), dur(median(a.rec)), a.blocked, a.stuck)
	}
	for _, k := range Kinds() {
		if a := byKind[k]; a != nil {
			row(k, a)
		}
	}
	row("all", all)
	tw.Flush()
	b.WriteString("checks:\n")
	for _, c := range res.Checks {
		b.WriteString("  ok  " + c + "\n")
	}
	if len(res.Violations) == 0 {
		b.WriteString("violations: none\n")
	} else {
		fmt.Fprintf(&b, "VIOLATIONS (%d):\n", len(res.Violations))
		for _, v := range res.Violations {
			b.WriteString("  " + v.Check + ": " + v.Detail + "\n")
		}
	}
	if res.Stuck > 0 {
		fmt.Fprintf(&b, "STUCK: the cluster did not recover after %d faults\n", res.Stuck)
	}
	timing := ""
	if res.Lease == CITiming.Lease.D() {
		timing = " TIMING=ci"
	}
	fmt.Fprintf(&b, "replay: make nemesis SEED=%d NODES=%d FAULTS=%d%s; timeline: %s\n", res.Seed, res.Nodes, len(res.Faults), timing, res.Dir+"/timeline.html")
	return b.String()
}

// Timeline drawing: one SVG per window of the run, a row per node showing
// its state as its API reported it, the writes of the epoch-blind log under
// it, fences, confirmations and releases from the history as marks, and
// the faults in a row on top. Tooltips are SVG <title>s: no script.

var stateColor = map[string]string{
	"off": "#444444", "paused": "#6fa8dc", "no daemon": "#999999", "no answer": "#c9b3e6",
	"secondary": "#eeeeee", "primary-elect": "#ffd966", "primary": "#6aa84f", "demoting": "#f6b26b",
	"stopping": "#f9cb9c", "blocked": "#e06666",
}

var kindColor = []string{"#d5a6bd", "#b4a7d6", "#9fc5e8", "#a2c4c9", "#b6d7a8", "#ffe599", "#f9cb9c", "#ea9999"}

func writeTimeline(path string, res *Result, segs []Segment, events []Event, ci checkInput) error {
	start, end := res.Start, res.Start.Add(res.Duration)
	window := 2 * time.Minute
	if res.Duration < window {
		window = res.Duration + time.Second
	}
	const width, rowH, left = 1400.0, 26.0, 70.0
	names := []string{}
	for i := 1; i <= res.Nodes; i++ {
		names = append(names, fmt.Sprintf("node%d", i))
	}
	rowOf := map[string]int{}
	for i, n := range names {
		rowOf[n] = i
	}
	kindIdx := map[string]int{}
	for i, k := range Kinds() {
		kindIdx[k] = i
	}
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>nemesis seed %d</title>\n", res.Seed)
	b.WriteString(`<style>body{font:13px sans-serif;margin:16px} pre{font-size:12px} svg{display:block;margin:8px 0 18px} .legend span{display:inline-block;padding:1px 6px;margin:0 4px 4px 0;border:1px solid #888}</style></head><body>` + "\n")
	fmt.Fprintf(&b, "<h1>nemesis: seed %d, %d nodes, %d faults</h1>\n<pre>%s</pre>\n<div class=\"legend\">", res.Seed, res.Nodes, len(res.Faults), esc(res.Summary))
	for _, s := range []string{"primary", "primary-elect", "blocked", "demoting", "secondary", "paused", "off", "no daemon", "no answer"} {
		fmt.Fprintf(&b, "<span style=\"background:%s\">%s</span>", stateColor[s], s)
	}
	b.WriteString("<span>▮ writes (epoch-blind log)</span><span>✕ fence confirmed</span><span>! fence failed</span><span>C confirmed by admin</span><span>R release</span></div>\n")
	for w0 := start; w0.Before(end); w0 = w0.Add(window) {
		w1 := w0.Add(window)
		scale := (width - left) / window.Seconds()
		x := func(t time.Time) float64 {
			if t.Before(w0) {
				t = w0
			}
			if t.After(w1) {
				t = w1
			}
			return left + t.Sub(w0).Seconds()*scale
		}
		visible := func(a, z time.Time) bool { return !z.Before(w0) && a.Before(w1) }
		height := rowH*float64(len(names)+1) + 24
		fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\">\n", width, height)
		fmt.Fprintf(&b, "<text x=\"0\" y=\"14\">%s</text>\n", w0.Format("15:04:05"))
		// time axis every 10s
		for t := w0.Truncate(10 * time.Second).Add(10 * time.Second); t.Before(w1); t = t.Add(10 * time.Second) {
			fmt.Fprintf(&b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"18\" y2=\"%.0f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.0f\" font-size=\"10\">%s</text>\n",
				x(t), x(t), height-12, x(t)+2, height-2, t.Format("04:05"))
		}
		// faults row
		y0 := 20.0
		fmt.Fprintf(&b, "<text x=\"0\" y=\"%.0f\">faults</text>\n", y0+16)
		var open []Event
		for _, e := range events {
			if e.Kind == "fault" {
				open = append(open, e)
			}
			if e.Kind == "heal" && len(open) > 0 {
				s := open[len(open)-1]
				open = open[:len(open)-1]
				if visible(s.Time, e.Time) {
					col := kindColor[kindIdx[s.What]%len(kindColor)]
					fmt.Fprintf(&b, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"%s\" stroke=\"#666\"><title>%s %s: %s → %s</title></rect>",
						x(s.Time), y0, max(1, x(e.Time)-x(s.Time)), rowH-4, col, esc(s.Detail), esc(s.What), s.Time.Format("15:04:05.000"), e.Time.Format("15:04:05.000"))
					fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\">%s</text>\n", x(s.Time)+2, y0+14, esc(s.What))
				}
			}
		}
		for i, n := range names {
			y := y0 + rowH*float64(i+1)
			fmt.Fprintf(&b, "<text x=\"0\" y=\"%.0f\">%s</text>\n", y+16, n)
			for _, s := range segs {
				if s.Node != n || !visible(s.From, s.To) {
					continue
				}
				col := stateColor[s.State]
				if col == "" {
					col = "#ffffff"
				}
				label := s.State
				if s.Epoch > 0 {
					label = fmt.Sprintf("%s epoch %d", s.State, s.Epoch)
				}
				if s.Info != "" {
					label += ": " + s.Info
				}
				fmt.Fprintf(&b, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"%s\"><title>%s %s, %s → %s</title></rect>",
					x(s.From), y, max(0.5, x(s.To)-x(s.From)), rowH-8, col, n, esc(label), s.From.Format("15:04:05.000"), s.To.Format("15:04:05.000"))
				if s.State == "primary" && x(s.To)-x(s.From) > 24 {
					fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\">e%d</text>", x(s.From)+2, y+12, s.Epoch)
				}
			}
			b.WriteString("\n")
		}
		drawWrites(&b, ci.blind, rowOf, x, w0, w1, y0, rowH)
		for _, h := range ci.history {
			t := h.At()
			if t.Before(w0) || t.After(w1) {
				continue
			}
			row, ok := rowOf[h.Target]
			if !ok {
				continue
			}
			y := y0 + rowH*float64(row+1)
			mark := ""
			switch {
			case h.Kind == "fence" && h.Outcome == "success" && h.Action != "on":
				mark = "✕"
			case h.Kind == "fence" && h.Outcome != "success" && h.Outcome != "pending":
				mark = "!"
			case h.Kind == "confirm":
				mark = "C"
			case h.Kind == "release":
				mark = "R"
			case h.Kind == "unfence":
				mark = "U"
			}
			if mark == "" {
				continue
			}
			fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"13\" font-weight=\"bold\" fill=\"#000\">%s<title>%s %s of %s by %s at epoch %d: %s %s</title></text>",
				x(t)-4, y+13, mark, h.Kind, esc(h.Action), h.Target, esc(h.Executor), h.Epoch, h.Outcome, esc(h.Error))
		}
		b.WriteString("</svg>\n")
	}
	b.WriteString("</body></html>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// drawWrites draws the epoch-blind log's writes as thin bars under each
// node's row: one per stretch of writes of one tenure with no pause over
// 200ms, labelled with the epoch.
func drawWrites(b *strings.Builder, recs []Record, rowOf map[string]int, x func(time.Time) float64, w0, w1 time.Time, y0, rowH float64) {
	flush := func(r Record, from, to time.Time) {
		row, ok := rowOf[r.Node]
		if !ok || to.Before(w0) || from.After(w1) {
			return
		}
		y := y0 + rowH*float64(row+1) + rowH - 8
		fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"5\" fill=\"#274e13\"><title>%s writes at epoch %d, %s → %s</title></rect>",
			x(from), y, max(1, x(to)-x(from)), r.Node, r.Epoch, from.Format("15:04:05.000"), to.Format("15:04:05.000"))
	}
	var cur Record
	var from, last time.Time
	for i, r := range recs {
		if i > 0 && (r.Node != cur.Node || r.Epoch != cur.Epoch || r.Time.Sub(last) > 200*time.Millisecond) {
			flush(cur, from, last)
			from = r.Time
		}
		if i == 0 {
			from = r.Time
		}
		cur, last = r, r.Time
	}
	if len(recs) > 0 {
		flush(cur, from, last)
	}
	b.WriteString("\n")
}
