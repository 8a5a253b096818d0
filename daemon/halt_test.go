package daemon_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/quorum"
)

// TestHaltOnNewerEntry: the primary's state machine is handed an entry of
// a newer fenced (as raft would hand it one). It does not skip it: the
// daemon stops its resources, stops renewing, and Run returns on its own;
// another node takes over at a higher epoch.
func TestHaltOnNewerEntry(t *testing.T) {
	ip := newInprocWith(t, 3, inprocOptions{storage: true})
	stop := ip.monitor()
	defer stop()
	p, e := ip.waitPrimary(20 * time.Second)
	i := 0
	for k, d := range ip.nodes {
		if d.Name() == p {
			i = k
		}
	}
	fsm := daemon.FSMOf(ip.nodes[i])
	fsm.Apply(&raft.Log{Index: 1 << 40, Data: []byte(fmt.Sprintf(`{"op":"acquire","node":"x","version":%d}`, quorum.ClusterVersionMax+1))})
	if h := fsm.Halted(); h == nil {
		t.Fatal("no halt")
	}
	select {
	case <-ip.done[i]:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s halted but its daemon still runs", p)
	}
	ip.closed[i].Store(true)
	if ip.res[i].running() {
		t.Fatalf("%s halted with its resource running", p)
	}
	var others []string
	for k, d := range ip.nodes {
		if k != i {
			others = append(others, d.Name())
		}
	}
	q, e2 := ip.waitPrimary(20*time.Second, others...)
	if e2 <= e {
		t.Fatalf("%s took over at epoch %d, not above %d", q, e2, e)
	}
}

// running reports whether the resource is started.
func (r *recordingResource) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.on
}
