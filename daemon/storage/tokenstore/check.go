package tokenstore

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Check proves a store's log safe and reports every violation at once:
//   - no write was accepted with an epoch lower than an epoch accepted
//     before it (a stale holder got through);
//   - no two nodes had writes accepted under the same epoch (two holders
//     with one token: their tenures overlapped).
//
// It checks the log, not the store's code: a crafted or corrupted log, or a
// store that misbehaved, is caught the same way.
func Check(entries []Entry) error {
	var errs []error
	var highest uint64
	highestAt := -1
	owner := map[uint64]int{} // epoch → index of its first accepted write
	for i, e := range entries {
		if e.Result != Accepted {
			continue
		}
		if e.Epoch < highest {
			errs = append(errs, fmt.Errorf("entry %d (%s, node %s): write accepted with stale epoch %d after epoch %d was accepted at entry %d",
				i+1, e.Time.Format(time.RFC3339Nano), e.Node, e.Epoch, highest, highestAt+1))
		} else {
			highest, highestAt = e.Epoch, i
		}
		if first, ok := owner[e.Epoch]; !ok {
			owner[e.Epoch] = i
		} else if f := entries[first]; f.Node != e.Node {
			errs = append(errs, fmt.Errorf("entry %d (%s): nodes %s and %s both had writes accepted under epoch %d (first at entry %d): two holders overlapped",
				i+1, e.Time.Format(time.RFC3339Nano), f.Node, e.Node, e.Epoch, first+1))
		}
	}
	return errors.Join(errs...)
}

// Tenure summarises one node's writes under one epoch.
type Tenure struct {
	Node     string    `json:"node"`
	Epoch    uint64    `json:"epoch"`
	Accepted int       `json:"accepted"`
	Rejected int       `json:"rejected"` // stale attempts
	First    time.Time `json:"first"`    // first accepted write
	Last     time.Time `json:"last"`     // last accepted write
}

// Tenures groups a log by node and epoch, ordered by epoch then node.
func Tenures(entries []Entry) []Tenure {
	type key struct {
		node  string
		epoch uint64
	}
	m := map[key]*Tenure{}
	for _, e := range entries {
		if e.Result == Invalid {
			continue
		}
		k := key{e.Node, e.Epoch}
		t := m[k]
		if t == nil {
			t = &Tenure{Node: e.Node, Epoch: e.Epoch}
			m[k] = t
		}
		if e.Result == Stale {
			t.Rejected++
			continue
		}
		t.Accepted++
		if t.First.IsZero() {
			t.First = e.Time
		}
		t.Last = e.Time
	}
	out := make([]Tenure, 0, len(m))
	for _, t := range m {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Epoch != out[j].Epoch {
			return out[i].Epoch < out[j].Epoch
		}
		return out[i].Node < out[j].Node
	})
	return out
}
