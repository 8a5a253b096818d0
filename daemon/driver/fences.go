package driver

import "github.com/fenced/fenced/stonith/fencing"

// Fences are the takeover fences one node runs, shared by its drivers (one
// per resource group): a node that fails is fenced once, whatever it held.
// When the machines of several groups take over from the same node at
// once, the first asks for the power-off and the others wait for its
// record instead of running their own. A confirmed power-off clears the
// node in every group when it is committed (quorum: what a record
// clears), so each waiting machine finds its group's former holder
// confirmed stopped; any other outcome, or a fence that cut only one
// group's storage, leaves it listed, and its machine fences again, as
// after any fence not confirmed.
//
// Like the drivers, Fences belongs to their one loop.
type Fences struct {
	running map[string][]func(fencing.Record)
	joins   int
}

// Joins is how many times a takeover waited for another group's fence of
// the same node instead of running its own.
func (f *Fences) Joins() int { return f.joins }

// join runs the power-off of target (run), or, if one is already under
// way for another group, waits for it; done gets the record of the one
// that ran.
func (f *Fences) join(target string, run func(done func(fencing.Record)), done func(fencing.Record)) {
	if waiting, ok := f.running[target]; ok {
		f.running[target] = append(waiting, done)
		f.joins++
		return
	}
	if f.running == nil {
		f.running = map[string][]func(fencing.Record){}
	}
	f.running[target] = []func(fencing.Record){done}
	run(func(rec fencing.Record) {
		waiting := f.running[target]
		delete(f.running, target)
		for _, w := range waiting {
			w(rec)
		}
	})
}

// Running reports whether a takeover's power-off of target is under way.
func (f *Fences) Running(target string) bool {
	_, ok := f.running[target]
	return ok
}

// fenceOnce is Fence for a takeover's power-off, run once per target
// across the node's drivers (Fences). A machine that joined another
// group's fence gets that fence's record: its outcome, not its epoch or
// group, is what the machine reads.
func (d *Driver) fenceOnce(s *Scope, req FenceRequest, done func(fencing.Record)) {
	d.env.Fences.join(req.Target, func(ran func(fencing.Record)) { d.Fence(s, req, ran) }, func(rec fencing.Record) {
		if rec.Group != req.Group || rec.Epoch != req.Epoch {
			d.lg.Info("former holder fenced by another group's takeover", "target", req.Target, "fence_id", rec.ID,
				"fence_group", groupName(rec.Group), "outcome", rec.Outcome)
		}
		done(rec)
	})
}

// groupName is how logs name a group ("" is the default).
func groupName(g string) string {
	if g == "" {
		return "default"
	}
	return g
}
