package timeline

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

var t0 = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

func at(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }

func steps(s ...any) []fencing.Step {
	var out []fencing.Step
	for i := 0; i < len(s); i += 2 {
		out = append(out, fencing.Step{Phase: s[i].(string), At: at(s[i+1].(int))})
	}
	return out
}

// The records of a takeover after node1, primary at epoch 3, was killed:
// node2 last heard from it at 0, stood at 1500, won at 1520, asked for
// epoch 4 at 1530, fenced node1 (off read back at 1580, recorded 1590),
// committed the start at 1600 and served at 1700.
func killed() []fencing.Record {
	return []fencing.Record{
		{ID: 1, Kind: fencing.KindPrimacy, Target: "node1", Epoch: 3, Started: at(-60000), Finished: at(-59900), Outcome: "success",
			Steps: steps("mounting", -59950, "serving", -59900)},
		{ID: 2, Kind: fencing.KindElection, Target: "node2", Term: 9, Previous: "node1", LastContact: at(0), Started: at(1500), Finished: at(1520), Outcome: "success"},
		{ID: 3, Kind: fencing.KindPrimacy, Target: "node2", Epoch: 4, Previous: "node1", Started: at(1530), Finished: at(1700), Outcome: "success",
			Reason: "node1 held epoch 3 (mounted) and had not released", Steps: steps("fencing", 1531, "mounting", 1600, "serving", 1700)},
		{ID: 4, Kind: fencing.KindFence, Target: "node1", Action: "off", Epoch: 4, RequestedBy: "node2 (takeover)", Executor: "node2", Started: at(1532),
			Finished: at(1590), Outcome: "success", Attempts: []fencing.Attempt{{Level: 1, Device: "node1-bmc", Action: "off", Result: "success",
				ReadBack: "off", Start: 3 * time.Millisecond, Duration: 45 * time.Millisecond}}},
	}
}

type span struct {
	name, node string
	from, to   int // ms from the failover's start
	open       bool
}

func spans(f Failover) []span {
	var out []span
	for _, p := range f.Phases {
		out = append(out, span{p.Name, p.Node, int(f.Offset(p.Start).Milliseconds()), int(f.Offset(p.End).Milliseconds()), p.Open})
	}
	return out
}

func TestBuild(t *testing.T) {
	now := at(5000)
	cases := []struct {
		name    string
		history []fencing.Record
		// want is the newest failover's.
		epoch   uint64
		from    string
		outcome string
		want    []span
		marks   []int // the read-back marks' offsets
	}{
		{"killed and fenced", killed(), 4, "node1", OutcomeServing, []span{
			{"detect", "node1", 0, 1500, false}, {"elect", "node2", 1500, 1530, false}, {"fence", "node1", 1532, 1590, false},
			{"confirm", "node2", 1590, 1600, false}, {"start", "node2", 1600, 1700, false}}, []int{1580}},
		{"handover", []fencing.Record{
			{ID: 1, Kind: fencing.KindPrimacy, Target: "node1", Epoch: 3, Started: at(-9000), Outcome: "success", Steps: steps("mounting", -8990, "serving", -8900)},
			{ID: 2, Kind: fencing.KindRelease, Target: "node1", Epoch: 3, Started: at(0), Finished: at(0), Outcome: "success", Reason: "handover"},
			{ID: 3, Kind: fencing.KindElection, Target: "node2", Term: 5, Previous: "node1", LastContact: at(2), Started: at(5), Finished: at(9), Outcome: "success"},
			{ID: 4, Kind: fencing.KindPrimacy, Target: "node2", Epoch: 4, Previous: "node1", Started: at(10), Outcome: "success", Steps: steps("mounting", 12, "serving", 40)},
		}, 4, "node1", OutcomeServing, []span{
			{"release", "node1", 0, 0, false}, {"detect", "node1", 2, 5, false}, {"elect", "node2", 5, 10, false},
			{"confirm", "node2", 10, 12, false}, {"start", "node2", 12, 40, false}}, nil},
		{"blocked", []fencing.Record{
			{ID: 1, Kind: fencing.KindElection, Target: "node2", Term: 9, Previous: "node1", LastContact: at(0), Started: at(1500), Finished: at(1520), Outcome: "success"},
			{ID: 2, Kind: fencing.KindPrimacy, Target: "node2", Epoch: 4, Previous: "node1", Started: at(1530), Outcome: "success", Steps: steps("fencing", 1531, "blocked", 2500)},
			{ID: 3, Kind: fencing.KindFence, Target: "node1", Action: "off", Epoch: 4, RequestedBy: "node2 (takeover)", Started: at(1532), Outcome: "pending", Runs: 3},
		}, 4, "node1", OutcomeBlocked, []span{
			{"detect", "node1", 0, 1500, false}, {"elect", "node2", 1500, 1530, false}, {"fence", "node1", 1532, 5000, true},
			{"confirm", "node2", 5000, 5000, true}}, nil},
		{"first grant", []fencing.Record{
			{ID: 1, Kind: fencing.KindElection, Target: "node1", Term: 2, Started: at(0), Finished: at(300), Outcome: "success"},
			{ID: 2, Kind: fencing.KindPrimacy, Target: "node1", Epoch: 1, Started: at(310), Outcome: "success", Steps: steps("mounting", 311, "serving", 350)},
		}, 1, "", OutcomeServing, []span{{"elect", "node1", 0, 310, false}, {"start", "node1", 311, 350, false}}, nil},
		{"lease expiry, storage still starting", []fencing.Record{
			{ID: 1, Kind: fencing.KindElection, Target: "node3", Term: 7, Previous: "node1", LastContact: at(0), Started: at(900), Finished: at(910), Outcome: "success"},
			{ID: 2, Kind: fencing.KindPrimacy, Target: "node3", Epoch: 6, Previous: "node1", Started: at(920), Outcome: "success", Steps: steps("waiting", 921, "mounting", 4400)},
			{ID: 3, Kind: fencing.KindExpiry, Target: "node1", Epoch: 6, Started: at(4390), Finished: at(4390), Outcome: "success"},
		}, 6, "node1", OutcomeInProgress, []span{
			{"detect", "node1", 0, 900, false}, {"elect", "node3", 900, 920, false}, {"confirm", "node3", 4390, 4400, false},
			{"start", "node3", 4400, 5000, true}}, nil},
		{"re-elected: no detect; an admin's fence is no phase", []fencing.Record{
			{ID: 1, Kind: fencing.KindElection, Target: "node2", Term: 12, Previous: "node1", LastContact: at(-90000), Started: at(-89000), Finished: at(1000), Runs: 2, Outcome: "success"},
			{ID: 2, Kind: fencing.KindPrimacy, Target: "node2", Epoch: 4, Previous: "node1", Started: at(-88000), Outcome: "success", Steps: steps("mounting", -87990, "serving", -87900)},
			{ID: 3, Kind: fencing.KindFence, Target: "node3", Action: "off", Epoch: 4, RequestedBy: "root@node2", Started: at(500), Finished: at(600), Outcome: "success"},
			{ID: 4, Kind: fencing.KindPrimacy, Target: "node2", Epoch: 5, Previous: "node2", Started: at(1010), Outcome: "success", Steps: steps("mounting", 1011, "serving", 1020)},
		}, 5, "", OutcomeServing, []span{{"elect", "node2", 0, 10, false}, {"start", "node2", 11, 20, false}}, nil},
		{"ended before serving", []fencing.Record{
			{ID: 1, Kind: fencing.KindPrimacy, Target: "node2", Epoch: 4, Previous: "node1", Started: at(0), Outcome: "success",
				Steps: []fencing.Step{{Phase: "waiting", At: at(1)}, {Phase: "demoting", At: at(700), Reason: "lease lost"}}},
		}, 4, "node1", OutcomeEnded, []span{{"confirm", "node2", 0, 700, false}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := Build(tc.history, now, 0)
			if len(fs) == 0 {
				t.Fatal("no failover")
			}
			f := fs[len(fs)-1]
			if f.Epoch != tc.epoch || f.From != tc.from || f.Outcome != tc.outcome {
				t.Errorf("epoch %d from %q outcome %q, want %d from %q %q", f.Epoch, f.From, f.Outcome, tc.epoch, tc.from, tc.outcome)
			}
			if got := spans(f); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("phases\n got %v\nwant %v", got, tc.want)
			}
			var marks []int
			for _, p := range f.Phases {
				for _, m := range p.Marks {
					marks = append(marks, int(f.Offset(m.At).Milliseconds()))
				}
			}
			if fmt.Sprint(marks) != fmt.Sprint(tc.marks) {
				t.Errorf("marks %v, want %v", marks, tc.marks)
			}
		})
	}
}

func TestBuildLast(t *testing.T) {
	h := killed()
	if fs := Build(h, at(5000), 0); len(fs) != 2 || fs[0].Epoch != 3 || fs[1].Epoch != 4 {
		t.Fatalf("all: %+v", fs)
	}
	if fs := Build(h, at(5000), 1); len(fs) != 1 || fs[0].Epoch != 4 {
		t.Fatalf("last 1: %+v", fs)
	}
	if fs := Build(nil, at(5000), 3); len(fs) != 0 {
		t.Fatalf("empty history: %+v", fs)
	}
}

func TestText(t *testing.T) {
	fs := Build(killed(), at(5000), 1)
	cases := []struct {
		name   string
		o      TextOptions
		want   []string
		ascii  bool
		maxLen int
	}{
		{"pipe", TextOptions{Width: 80, Location: time.UTC}, []string{
			"Epoch 4: node1 → node2, from 2026-12-02 03:00:00.000 UTC, serving after 1700 ms",
			"PHASE", "detect   node1  +0     +1500", "fence    node1  +1532  +1590", "read back off at +1580 ms", "start    node2  +1600  +1700",
		}, true, 0},
		{"terminal", TextOptions{Width: 120, Blocks: true, Location: time.UTC}, []string{"█", "elect    node2  +1500  +1530"}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Text(&b, fs, tc.o); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("lacks %q:\n%s", w, out)
				}
			}
			if tc.ascii {
				// Only the header's arrow is not ASCII: the bars are.
				for _, r := range strings.ReplaceAll(out, "→", "") {
					if r > 0x7e || r < 0x20 && r != '\n' {
						t.Errorf("non-ASCII %q in plain output:\n%s", r, out)
						break
					}
				}
			}
		})
	}
}

func TestDrawBar(t *testing.T) {
	cases := []struct {
		from, to, total time.Duration
		width           int
		blocks          bool
		want            string
	}{
		{0, 10, 10, 10, false, "##########"},
		{0, 5, 10, 10, false, "#####     "},
		{5, 5, 10, 10, false, "     |    "},  // no length: a tick
		{9, 10, 10, 10, false, "         #"}, // the last cell
		{0, 10, 0, 4, false, "####"},         // no total: no division by zero
		{-5, 50, 10, 4, false, "####"},       // out of range: clipped
		{0, 10, 10, 4, true, "████"},         // blocks
		{0, 5, 10, 3, true, "█▌ "},           // a half cell
		{7, 7, 10, 10, true, "       ▏  "},   // no length
		{10, 10, 10, 10, true, "         ▏"}, // at the very end
	}
	for _, tc := range cases {
		if got := drawBar(tc.from, tc.to, tc.total, tc.width, tc.blocks); got != tc.want {
			t.Errorf("drawBar(%v, %v, %v, %d, %v) = %q, want %q", tc.from, tc.to, tc.total, tc.width, tc.blocks, got, tc.want)
		}
	}
}

func TestTicks(t *testing.T) {
	cases := []struct {
		total time.Duration
		want  string
	}{
		{1700 * time.Millisecond, "[0s 500ms 1s 1.5s 1.7s]"},
		{40 * time.Millisecond, "[0s 10ms 20ms 30ms 40ms]"},
		{3 * time.Millisecond, "[0s 1ms 2ms 3ms]"},
		{0, "[0s]"},
	}
	for _, tc := range cases {
		if got := fmt.Sprint(ticks(tc.total)); got != tc.want {
			t.Errorf("ticks(%v) = %s, want %s", tc.total, got, tc.want)
		}
	}
}

// The SVG is well-formed XML, has a bar per phase with its node, escapes
// what the history holds, and says so when there is nothing to draw.
func TestSVG(t *testing.T) {
	h := killed()
	h[3].Target = `node1<script>alert(1)</script>`
	h[2].Previous = h[3].Target
	fs := Build(h, at(5000), 0)
	svg := SVG(fs, time.UTC)
	if strings.Contains(svg, "<script") {
		t.Fatalf("unescaped markup in the SVG:\n%s", svg)
	}
	dec := xml.NewDecoder(strings.NewReader(svg))
	bars := map[string]string{}
	epochs := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			attr := map[string]string{}
			for _, a := range se.Attr {
				attr[a.Name.Local] = a.Value
			}
			if se.Name.Local == "g" && attr["data-epoch"] != "" {
				epochs++
			}
			if se.Name.Local == "rect" && attr["data-epoch"] == "" && attr["data-phase"] != "" {
				bars[attr["data-phase"]+"/"+attr["data-node"]] = attr["width"]
			}
		}
	}
	if epochs != 2 {
		t.Errorf("%d failovers drawn, want 2", epochs)
	}
	for _, want := range []string{"detect/node1", "elect/node2", "fence/" + h[3].Target, "confirm/node2", "start/node2"} {
		if _, ok := bars[want]; !ok {
			t.Errorf("no bar %s among %v", want, bars)
		}
	}
	if !strings.Contains(SVG(nil, time.UTC), "No failover") {
		t.Error("an empty timeline does not say so")
	}
}
