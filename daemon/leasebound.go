package daemon

import (
	"context"
	"encoding/json"
	"slices"
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
// over any majority bounds s from above — so the majority of answers with
// the earliest contacts gives the tightest bound; old stops at
// s + lease − margin, and we wait until bound + lease + margin. A node that
// has no record (it restarted) counts as contact at r: the safe direction.
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
	own := now
	if e, ok := d.raft.SinceContact(old); ok {
		own = now - quorum.Mono(e)
	}
	got := []quorum.Mono{own}
	// Once a majority answered, wait a moment for the rest: any majority
	// gives a valid bound, and more answers allow a tighter one.
	var grace <-chan time.Time
	for {
		select {
		case a, open := <-answers:
			if !open {
				return boundOf(got, d.cfg.Majority())
			}
			if a.ok {
				got = append(got, a.at)
			}
			if len(got) >= d.cfg.Majority() && grace == nil {
				grace = time.After(50 * time.Millisecond)
			}
			continue
		case <-grace:
		}
		return boundOf(got, d.cfg.Majority())
	}
}

// boundOf returns the majority-th smallest contact time: the nodes with
// the earliest last contacts form a majority, which includes a node that
// stored the old primary's last renewal, so that renewal started no later.
func boundOf(contacts []quorum.Mono, majority int) (quorum.Mono, bool) {
	if len(contacts) < majority {
		return 0, false
	}
	slices.Sort(contacts)
	// A millisecond for the clock conversions.
	return contacts[majority-1].Add(time.Millisecond), true
}
