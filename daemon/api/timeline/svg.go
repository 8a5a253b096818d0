package timeline

import (
	"fmt"
	"html"
	"strings"
	"time"
)

// Colours of the phases (readable on white and for the common colour
// blindnesses: they differ in lightness too).
var phaseColours = map[string]string{
	PhaseDetect: "#9e9e9e", PhaseRelease: "#80cbc4", PhaseElect: "#5c6bc0", PhaseFence: "#d84315",
	PhaseConfirm: "#f9a825", PhaseStart: "#2e7d32",
}

// SVG geometry, in user units.
const (
	svgWidth  = 900
	svgLabel  = 190 // phase and node labels left of the chart
	svgRight  = 20
	svgRow    = 22
	svgHeader = 40
	svgGap    = 18
)

// SVG draws the failovers as one SVG document, newest first: per
// failover a heading and a row per phase (its name and node at the left, a
// bar on a millisecond scale, the offsets and what happened in its
// tooltip). Every element a reader (or a test) looks for carries a class
// and data- attributes: data-epoch on each failover's group, data-phase
// and data-node on each bar. All text is escaped.
func SVG(fs []Failover, loc *time.Location) string {
	if loc == nil {
		loc = time.Local
	}
	var b strings.Builder
	height := 30
	for _, f := range fs {
		height += svgHeader + svgRow*len(f.Phases) + svgGap
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="timeline of the last failovers" font-family="sans-serif" font-size="12">`,
		svgWidth, height)
	if len(fs) == 0 {
		b.WriteString(`<text x="0" y="20" class="empty">No failover in the history.</text></svg>`)
		return b.String()
	}
	chart := float64(svgWidth - svgLabel - svgRight)
	y := 10
	for i := len(fs) - 1; i >= 0; i-- {
		f := fs[i]
		total := f.End().Sub(f.Start)
		if total <= 0 {
			total = time.Millisecond
		}
		x := func(t time.Time) float64 {
			return svgLabel + chart*float64(f.Offset(t))/float64(total)
		}
		fmt.Fprintf(&b, `<g class="failover" data-epoch="%d" data-to="%s" data-from="%s" data-outcome="%s">`, f.Epoch, esc(f.To), esc(f.From), esc(f.Outcome))
		fmt.Fprintf(&b, `<text x="0" y="%d" font-weight="bold" class="heading">%s</text>`, y+14, esc(strings.SplitN(header(f, loc), "\n", 2)[0]))
		// The scale: a tick at 0, at the end, and at round steps between.
		axis := y + svgHeader - 6
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#bbb"/>`, svgLabel, axis, svgWidth-svgRight, axis)
		for _, t := range ticks(total) {
			tx := svgLabel + chart*float64(t)/float64(total)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb"/><text x="%.1f" y="%d" text-anchor="middle" fill="#555" font-size="10">%d ms</text>`,
				tx, axis-3, tx, axis+3+svgRow*len(f.Phases), tx, axis-5, t.Milliseconds())
		}
		for j, p := range f.Phases {
			ry := axis + 4 + j*svgRow
			x0, x1 := x(p.Start), x(p.End)
			w := max(x1-x0, 2) // a phase of no length still shows
			tip := fmt.Sprintf("%s %s: +%d to +%d ms", p.Name, p.Node, f.Offset(p.Start).Milliseconds(), f.Offset(p.End).Milliseconds())
			if p.Open {
				tip += " (under way)"
			}
			if p.Detail != "" {
				tip += "\n" + p.Detail
			}
			fmt.Fprintf(&b, `<text x="0" y="%d" class="label">%s</text><text x="70" y="%d" class="node">%s</text>`, ry+14, esc(p.Name), ry+14, esc(p.Node))
			opacity := "1"
			if p.Open {
				opacity = "0.55"
			}
			fmt.Fprintf(&b, `<rect class="phase %s" data-phase="%s" data-node="%s" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%s"><title>%s</title></rect>`,
				esc(p.Name), esc(p.Name), esc(p.Node), x0, ry+3, w, svgRow-6, phaseColours[p.Name], opacity, esc(tip))
			for _, m := range p.Marks {
				mx := x(m.At)
				fmt.Fprintf(&b, `<line class="mark" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-width="2"><title>%s at +%d ms</title></line>`,
					mx, ry+1, mx, ry+svgRow-1, esc(m.Label), f.Offset(m.At).Milliseconds())
			}
			// The offsets beside the bar, where there is room.
			label := fmt.Sprintf("+%d ms", f.Offset(p.Start).Milliseconds())
			if d := p.End.Sub(p.Start); d >= time.Millisecond {
				label += fmt.Sprintf(", %d ms", d.Milliseconds())
			}
			if lx := x0 + w + 4; lx < svgWidth-svgRight-60 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#333" font-size="10" class="offset">%s</text>`, lx, ry+14, esc(label))
			} else {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#333" font-size="10" text-anchor="end" class="offset">%s</text>`, x0-4, ry+14, esc(label))
			}
		}
		b.WriteString(`</g>`)
		y += svgHeader + svgRow*len(f.Phases) + svgGap
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// ticks are the scale's marks for a chart of total: at 0, the end, and 3
// to 6 round steps (1, 2 or 5 times a power of ten ms) between.
func ticks(total time.Duration) []time.Duration {
	step := time.Millisecond
	for total/step > 6 {
		switch s := step; {
		case strings.HasPrefix(fmt.Sprint(s.Milliseconds()), "1"):
			step = 2 * s
		case strings.HasPrefix(fmt.Sprint(s.Milliseconds()), "2"):
			step = s / 2 * 5
		default:
			step = 2 * s
		}
	}
	var out []time.Duration
	for t := time.Duration(0); t < total; t += step {
		if total-t >= step/4 || t == 0 { // room for both labels
			out = append(out, t)
		}
	}
	return append(out, total)
}

func esc(s string) string { return html.EscapeString(clean(s)) }
