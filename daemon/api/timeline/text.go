package timeline

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// TextOptions shape the text chart.
type TextOptions struct {
	// Width is the line width to fit (a terminal's; < 60 counts as 60).
	Width int
	// Blocks draws bars with Unicode block characters (a terminal);
	// otherwise with '#' and '|', plain ASCII for a file or a pipe.
	Blocks bool
	// Location shows the times (nil: local time).
	Location *time.Location
}

// Text writes each failover as a small Gantt chart: a header line (epoch,
// from whom to whom, when, how long until it served), then a line per
// phase with its node, its offsets in milliseconds from the failover's
// start, a bar on a common scale and what happened.
func Text(w io.Writer, fs []Failover, o TextOptions) error {
	if o.Width < 60 {
		o.Width = 60
	}
	loc := o.Location
	if loc == nil {
		loc = time.Local
	}
	for i, f := range fs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, header(f, loc))
		total := f.End().Sub(f.Start)
		// The bar takes what the columns before it leave of the width,
		// and at most half of it (the detail needs room too).
		bar := min(max(o.Width/2-4, 20), 60)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  PHASE\tNODE\tSTART\tEND\t%s\tDETAIL\n", scale(total, bar))
		for _, p := range f.Phases {
			end := fmt.Sprintf("+%d", f.Offset(p.End).Milliseconds())
			if p.Open {
				end += "…"
				if !o.Blocks {
					end = end[:len(end)-len("…")] + "..."
				}
			}
			detail := p.Detail
			for _, m := range p.Marks {
				detail += fmt.Sprintf("; %s at +%d ms", m.Label, f.Offset(m.At).Milliseconds())
			}
			fmt.Fprintf(tw, "  %s\t%s\t+%d\t%s\t%s\t%s\n", p.Name, clean(p.Node), f.Offset(p.Start).Milliseconds(), end,
				drawBar(f.Offset(p.Start), f.Offset(p.End), total, bar, o.Blocks), clean(detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func header(f Failover, loc *time.Location) string {
	from := "first grant"
	if f.From != "" {
		from = clean(f.From) + " →"
	}
	s := fmt.Sprintf("Epoch %d: %s %s, from %s", f.Epoch, from, clean(f.To), f.Start.In(loc).Format("2006-01-02 15:04:05.000 MST"))
	switch f.Outcome {
	case OutcomeServing:
		s += fmt.Sprintf(", serving after %d ms", f.Offset(f.Serving).Milliseconds())
	case OutcomeBlocked:
		s += ", BLOCKED: every fence path failed, retrying"
	case OutcomeEnded:
		s += ", ended before serving"
	default:
		s += ", in progress"
	}
	if f.Reason != "" {
		s += "\n  " + clean(f.Reason)
	}
	return s
}

// scale is the bar column's heading: "0 ms" at its left, the total at its
// right.
func scale(total time.Duration, width int) string {
	left, right := "0", fmt.Sprintf("%d ms", total.Milliseconds())
	pad := max(width-len(left)-len(right), 1)
	return left + strings.Repeat(" ", pad) + right
}

// drawBar draws [from, to] of total on width characters. A phase too short
// to fill one still shows as one (a thin bar).
func drawBar(from, to, total time.Duration, width int, blocks bool) string {
	if total <= 0 {
		total = 1
	}
	// In eighths of a character.
	a := int(int64(from) * int64(width) * 8 / int64(total))
	b := int(int64(to) * int64(width) * 8 / int64(total))
	a, b = min(max(a, 0), width*8), min(max(b, 0), width*8)
	cells := make([]rune, width)
	for i := range cells {
		cells[i] = ' '
	}
	if !blocks {
		lo, hi := a/8, (b+7)/8
		if hi <= lo {
			hi = lo + 1
		}
		for i := lo; i < hi && i < width; i++ {
			cells[i] = '#'
		}
		if hi-lo == 1 && b-a < 4 {
			cells[min(lo, width-1)] = '|'
		}
		return string(cells)
	}
	// Left edge: a cell that starts part-way is drawn full (Unicode has
	// no right-aligned eighths in common fonts); the right edge is exact.
	lo, hi := a/8, b/8
	for i := lo; i < hi && i < width; i++ {
		cells[i] = '█'
	}
	if rest := b % 8; hi < width && rest > 0 {
		cells[hi] = []rune(" ▏▎▍▌▋▊▉")[rest]
	}
	if hi <= lo && (hi >= width || cells[hi] == ' ') {
		cells[min(lo, width-1)] = '▏'
	}
	return string(cells)
}

// clean keeps control characters out of the terminal.
func clean(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
}
