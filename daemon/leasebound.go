package daemon

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
)

const fwdContact = "contact" // "how long since you heard from leader X?"

type contactReq struct {
	Leader string `json:"leader"`
}

type contactResp struct {
	Known     bool  `json:"known"`
	ElapsedNs int64 `json:"elapsedNs"`
}

func (d *Daemon) answerContact(body []byte) ([]byte, error) {
	var req contactReq
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	e, ok := d.raft.SinceContact(req.Leader)
	return json.Marshal(contactResp{Known: ok, ElapsedNs: int64(e)})
}

// leaseBound returns a point on this node's clock after which the former
// primary `old` has certainly renewed no more, learned from a majority of the
// configured nodes (see tenure.BoundOf for why it is safe); ok is false if
// not enough of them answered in time. It returns only after every query it
// started has ended.
func (d *Daemon) leaseBound(ctx context.Context, old string) (tenure.Time, bool) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timing.Lease.D()/2)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	body, _ := json.Marshal(contactReq{Leader: old})
	type answer struct {
		at tenure.Time
		ok bool
	}
	answers := make(chan answer, len(d.cfg.Nodes))
	for _, n := range d.cfg.Nodes {
		if n.Name == d.self {
			continue
		}
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			out, err := d.members.Call(ctx, name, fwdContact, body)
			r := d.now()
			var resp contactResp
			if err != nil || json.Unmarshal(out, &resp) != nil || resp.ElapsedNs < 0 {
				answers <- answer{}
				return
			}
			at := r
			if resp.Known {
				at = r.Add(-time.Duration(resp.ElapsedNs))
			}
			answers <- answer{at: at, ok: true}
		}(n.Name)
	}

	// This node's own record counts as one answer.
	now := d.now()
	own := now
	if e, ok := d.raft.SinceContact(old); ok {
		own = now.Add(-e)
	}
	got := []tenure.Time{own}
	majority := d.cfg.Majority()
	// Once a majority answered, wait a moment for the rest: any majority
	// gives a valid bound, and more answers allow a tighter one.
	var grace <-chan time.Time
	for pending := len(d.cfg.Nodes) - 1; pending > 0; {
		select {
		case a := <-answers:
			pending--
			if a.ok {
				got = append(got, a.at)
			}
			if len(got) >= majority && grace == nil {
				grace = time.After(50 * time.Millisecond)
			}
			continue
		case <-grace:
		case <-ctx.Done():
		}
		break
	}
	return tenure.BoundOf(got, majority)
}
