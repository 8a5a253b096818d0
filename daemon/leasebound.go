package daemon

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/fenced/fenced/quorum"
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
// primary `old` has certainly stopped acting on its lease, learned from a
// majority of the configured nodes; ok is false if not enough of them
// answered in time.
//
// Why it is safe: old's last renewal started at s and was stored by a
// majority after s. Any majority of answers includes one of those nodes, F,
// whose last contact with old is at or after s. F answers "elapsed e" at a
// moment before we receive it at r, so s ≤ r − e. Taking the largest r − e
// over a majority bounds s from above; old stops at s + lease − margin, and
// we wait until bound + lease + margin. A node that has no record (it
// restarted) counts as contact at r: the safe direction.
func (d *Daemon) leaseBound(ctx context.Context, old string) (quorum.Mono, bool) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timing.Lease.D()/2)
	defer cancel()
	body, _ := json.Marshal(contactReq{Leader: old})
	type answer struct {
		at quorum.Mono
		ok bool
	}
	answers := make(chan answer, len(d.cfg.Nodes))
	var wg sync.WaitGroup
	for _, n := range d.cfg.Nodes {
		if n.Name == d.self {
			continue
		}
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			out, err := d.members.Call(ctx, name, fwdContact, body)
			r := quorum.Now()
			var resp contactResp
			if err != nil || json.Unmarshal(out, &resp) != nil {
				answers <- answer{}
				return
			}
			at := r
			if resp.Known {
				at = r - quorum.Mono(resp.ElapsedNs)
			}
			answers <- answer{at: at, ok: true}
		}(n.Name)
	}
	go func() { wg.Wait(); close(answers) }()

	// This node's own record counts as one answer.
	now := quorum.Now()
	bound := now
	if e, ok := d.raft.SinceContact(old); ok {
		bound = now - quorum.Mono(e)
	}
	got := 1
	for a := range answers {
		if !a.ok {
			continue
		}
		got++
		if a.at > bound {
			bound = a.at
		}
		if got >= d.cfg.Majority() {
			// A millisecond for the clock conversions.
			return bound.Add(time.Millisecond), true
		}
	}
	return 0, false
}
