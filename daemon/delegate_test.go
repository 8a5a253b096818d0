package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// The node that must fence cannot, but a peer can (issue 24): node1's
// password file for every BMC is wrong, the others' are right. The primary
// is another node, the third is in standby, so when the primary is killed
// node1 leads and must fence it. Its own checks of the dead primary's BMC
// fail (authentication), the standby node's pass: node1 hands the fence to
// it, commits the record it sends back (attempts and read-back included,
// executor the standby node) and starts the storage. Without the hand-off
// node1 retries its own failing path and the takeover never completes.
func TestFenceHandedToPeerThatCanFence(t *testing.T) {
	dir := t.TempDir()
	wrongPW := filepath.Join(dir, "wrong-password")
	if err := os.WriteFile(wrongPW, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true,
		NodeConfig: func(i int, cfg *config.Config) {
			if i != 0 {
				return
			}
			devs := make(map[string]config.Device, len(cfg.Devices)) // shared with the other nodes' copies
			for name, d := range cfg.Devices {
				params := make(map[string]string, len(d.Params))
				for k, v := range d.Params {
					params[k] = v
				}
				params["password_file"] = wrongPW
				d.Params = params
				devs[name] = d
			}
			cfg.Devices = devs
		}})
	wrong := c.Nodes[0]
	p, _ := primaryWriting(t, c)
	if p == wrong {
		cl := wrong.Client()
		if err := cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/transfer", nil, daemon.AdminRequest{Node: c.Nodes[1].Name}, nil); err != nil {
			t.Fatal(err)
		}
		cl.Close()
		var err error
		if p, _, err = c.Primary(ctxT(t, 20*time.Second), wrong); err != nil {
			t.Fatal(err)
		}
	}
	var peer *devcluster.Node
	for _, n := range c.Nodes {
		if n != wrong && n != p {
			peer = n
		}
	}
	cl := peer.Client()
	if err := cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/standby", nil, daemon.AdminRequest{Node: peer.Name, Flag: true}, nil); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	pathTo := func(n *devcluster.Node, target string) string {
		st, err := n.Status(ctxT(t, 5*time.Second))
		if err != nil {
			return ""
		}
		for _, fp := range st.FencePaths {
			if fp.Node == target {
				return fp.State
			}
		}
		return ""
	}
	waitUntil(t, "node1's checks failing and the peer's working", 30*time.Second, func() bool {
		return pathTo(wrong, p.Name) == api.PathFailing && pathTo(peer, p.Name) == api.PathWorking
	})
	_, e1, err := c.Primary(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	watchSafety(t, c)

	p.Kill()
	q, e2, err := c.Primary(ctxT(t, 30*time.Second), p)
	if err != nil {
		b, _ := os.ReadFile(wrong.Log)
		t.Fatalf("no takeover after the kill of %s: %v\n%s", p.Name, err, tail(string(b), 6000))
	}
	if q != wrong || e2 <= e1 {
		t.Fatalf("primary %s at epoch %d after %s at %d; want %s", q.Name, e2, p.Name, e1, wrong.Name)
	}
	waitWrites(t, c, q.Name, e2, 10*time.Second)
	var fences []fencing.Record
	for _, r := range history(t, q, p.Name) {
		if r.Kind == fencing.KindFence {
			fences = append(fences, r)
		}
	}
	if len(fences) != 1 {
		t.Fatalf("fence records of %s: %+v; want one", p.Name, fences)
	}
	f := fences[0]
	if f.Executor != peer.Name || f.Outcome != fencing.OutcomeSuccess || f.Epoch != e2 || f.RequestedBy != wrong.Name+" (takeover)" ||
		len(f.Attempts) == 0 || f.Attempts[len(f.Attempts)-1].ReadBack != "off" {
		t.Fatalf("fence record %+v; want a success by %s at epoch %d, requested by %s, read back off", f, peer.Name, e2, wrong.Name)
	}
	if c.BMCs[p.Index].PoweredOn() {
		t.Errorf("%s's BMC reads powered on after its fence", p.Name)
	}
	b, _ := os.ReadFile(peer.Log)
	if !strings.Contains(string(b), "fencing for the leader") {
		t.Errorf("%s's log does not say it fenced for the leader", peer.Name)
	}
	t.Logf("%s fenced by %s for %s in %v; the takeover completed at epoch %d", p.Name, f.Executor, wrong.Name, f.Finished.Sub(f.Started).Round(time.Millisecond), e2)
}
