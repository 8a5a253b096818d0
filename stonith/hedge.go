package stonith

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

// How long a kept device of a running level may stay silent before the
// next level starts alongside: three request timeouts of the device (its
// measured round trip and variation, see the agent), within
// [hedgeMin, hedgeMax]; hedgeUnmeasured before it ever answered.
const (
	hedgeMin        = 500 * time.Millisecond
	hedgeMax        = 5 * time.Second
	hedgeUnmeasured = 2 * time.Second
)

type levelDone struct {
	n   int
	res levelResult
}

// offHedged walks the levels as off does, but a level that is not
// answering does not hold up the next: see the package documentation,
// "Levels in parallel". Success is still one level whose every device was
// read back off; the first such level wins and the others still running
// are stopped (their tries are recorded, stopped and unknown or failed).
func (o *operation) offHedged(ctx context.Context) (outcome string, level int, msg string) {
	topo := o.req.Topology
	results := make(chan levelDone, len(topo))
	hedge := make(chan int, len(topo))
	cancels := make([]context.CancelCauseFunc, len(topo)+1)
	var wg sync.WaitGroup
	started, running := 0, 0
	start := func(n int) {
		lctx, cancel := context.WithCancelCause(ctx)
		cancels[n] = cancel
		started, running = n, running+1
		devs := topo[n-1].Devices
		answered := make([]chan struct{}, len(devs))
		hooks := make([]func(), len(devs))
		for i := range devs {
			ch := make(chan struct{})
			var once sync.Once
			answered[i], hooks[i] = ch, func() { once.Do(func() { close(ch) }) }
		}
		end := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			res := o.levelWatched(lctx, n, fencing.ActionOff, hooks)
			close(end)
			results <- levelDone{n, res}
		}()
		go func() {
			defer wg.Done()
			o.watch(lctx, n, answered, end, hedge)
		}()
	}
	start(1)
	problems := map[int]string{}
	unknown := false
	won := 0
	for running > 0 {
		select {
		case d := <-results:
			running--
			switch {
			case won != 0:
				// Stopped, or done after the winner: recorded, not counted.
			case d.res.ok:
				won = d.n
				for m, c := range cancels {
					if c != nil && m != d.n {
						c(fmt.Errorf("level %d confirmed the fence", d.n))
					}
				}
			default:
				unknown = unknown || d.res.unknown
				problems[d.n] = d.res.err
				o.log.Warn("fence level failed", "level", d.n, "error", d.res.err)
				if d.n == started && started < len(topo) && ctx.Err() == nil {
					start(started + 1)
				}
			}
		case n := <-hedge:
			if won == 0 && n == started && started < len(topo) && ctx.Err() == nil {
				o.log.Warn("fence level not answering: starting the next level alongside", "level", n, "next", n+1)
				start(started + 1)
			}
		}
	}
	wg.Wait()
	for _, c := range cancels {
		if c != nil {
			c(nil)
		}
	}
	if won != 0 {
		return fencing.OutcomeSuccess, won, ""
	}
	var out []string
	for n := 1; n <= len(topo); n++ {
		if p, ok := problems[n]; ok {
			out = append(out, fmt.Sprintf("level %d: %s", n, p))
		} else if n > started && ctx.Err() != nil {
			out = append(out, fmt.Sprintf("level %d: not tried: %v", n, ctx.Err()))
			break
		}
	}
	if unknown {
		return fencing.OutcomeUnknown, 0, strings.Join(out, "; ")
	}
	return fencing.OutcomeFailed, 0, strings.Join(out, "; ")
}

// watch sends n on hedge when level n is not answering: a device whose
// agent is kept failed its last check (it is probably still down: waiting
// for its timeouts helps nobody), or a kept device whose agent reports its
// answers has not answered at all within its wait. Devices the engine has
// no measurements of are not judged: their level runs to its end first.
func (o *operation) watch(ctx context.Context, n int, answered []chan struct{}, end <-chan struct{}, hedge chan<- int) {
	type candidate struct {
		i    int
		wait time.Duration
		why  string
	}
	var cands []candidate
	for i, t := range o.req.Topology[n-1].Devices {
		k := o.e.keptFor(t)
		if k == nil {
			continue
		}
		if failing, err := k.failing(); failing {
			cands = append(cands, candidate{i, 0, "its last check failed: " + err.Error()})
			continue
		}
		if r, ok := k.a.(interface{ ReportsAnswers() bool }); !ok || !r.ReportsAnswers() {
			continue
		}
		wait := hedgeUnmeasured
		if _, rto, ok := k.roundTrip(); ok {
			wait = min(max(3*rto, hedgeMin), hedgeMax)
		}
		cands = append(cands, candidate{i, wait, fmt.Sprintf("no answer within %v", wait.Round(time.Millisecond))})
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].wait < cands[b].wait })
	t0 := time.Now()
	for _, c := range cands {
		if c.wait > 0 {
			t := time.NewTimer(time.Until(t0.Add(c.wait)))
			select {
			case <-answered[c.i]:
				t.Stop()
				continue
			case <-end:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		select {
		case <-answered[c.i]:
			continue
		default:
		}
		o.log.Warn("fence device not answering", "level", n, "device", o.req.Topology[n-1].Devices[c.i].Device, "reason", c.why)
		select {
		case hedge <- n:
		default:
		}
		return
	}
}
