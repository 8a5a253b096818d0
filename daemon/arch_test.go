package daemon_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestArchitecture keeps the layering of DESIGN.md, on transitive imports
// (what a package links, not only what it names): every package has a doc
// comment; agents know nothing of the cluster; the fencing engine knows
// agents only; quorum knows neither the daemon, the engine nor the agents
// (the history's records are stonith/fencing, a leaf); the safety core is a
// leaf; its driver links no engine or agent (it talks to them through its
// Effects); the configuration links only the leaves whose rules it checks;
// the API's wire types link no engine, raft or gossip. Each
// package is held to the most specific rule above it.
func TestArchitecture(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Doc}}|{{join .Deps \",\"}}", "github.com/fenced/fenced/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/fenced/fenced/"
	raft, gossip := "github.com/hashicorp/raft", "github.com/hashicorp/memberlist"
	// rule: what a package (and those under it without a rule of their
	// own) must not link, even through another, and the exceptions.
	type rule struct{ forbid, allow []string }
	rules := map[string]rule{
		"agents":            {forbid: []string{"daemon", "quorum", "stonith", "cmd", "harness"}},
		"stonith":           {forbid: []string{"daemon", "quorum", "cmd", "harness"}},
		"stonith/fencing":   {forbid: []string{"agents", "stonith", "daemon", "quorum", "cmd", "harness"}, allow: []string{"stonith/fencing"}},
		"quorum":            {forbid: []string{"daemon", "agents", "stonith", "cmd", "harness"}, allow: []string{"stonith/fencing"}},
		"daemon":            {forbid: []string{"cmd", "harness"}},
		"daemon/tenure":     {forbid: []string{"agents", "stonith", "quorum", "daemon", "cmd", "harness"}, allow: []string{"daemon/tenure"}},
		"daemon/tenure/sim": {forbid: []string{"cmd", "harness"}},
		"daemon/driver":     {forbid: []string{"agents", "stonith", "daemon", "cmd", "harness"}, allow: []string{"daemon/driver", "daemon/tenure", "stonith/fencing"}},
		// The configuration checks what it holds against the rules of
		// the leaves that own them (timing, alert vocabulary, each fence
		// agent's parameter table), for FILE:LINE errors; it links no
		// agent, engine or subsystem ("agents$": that package, not those
		// under it).
		"daemon/config": {forbid: []string{"agents", "stonith", "quorum", "daemon", "cmd", "harness", raft, gossip}, allow: []string{"daemon/config", "daemon/tenure", "daemon/alerts", "agents$"}},
		"daemon/api":    {forbid: []string{"agents", "stonith", "quorum", "daemon", "cmd", "harness", raft, gossip}, allow: []string{"daemon/api", "stonith/fencing"}},
	}
	under := func(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	ruleOf := func(pkg string) (string, bool) {
		best := ""
		for r := range rules {
			if under(pkg, r) && len(r) > len(best) {
				best = r
			}
		}
		return best, best != ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 3)
		pkg, doc, deps := strings.TrimPrefix(f[0], mod), f[1], strings.Split(f[2], ",")
		if doc == "" {
			t.Errorf("package %s has no doc comment", pkg)
		}
		name, ok := ruleOf(pkg)
		if !ok {
			continue
		}
		r := rules[name]
	deps:
		for _, dep := range deps {
			d, ours := strings.CutPrefix(dep, mod)
			for _, a := range r.allow {
				if exact, ok := strings.CutSuffix(a, "$"); ours && (ok && d == exact || !ok && under(d, a)) {
					continue deps
				}
			}
			for _, bad := range r.forbid {
				if ours && under(d, bad) || !ours && under(dep, bad) {
					t.Errorf("%s links %s: %s must not depend on %s", pkg, dep, name, bad)
				}
			}
		}
	}
}

// TestFencectlLinks: the CLI links the API's wire types and its client, and
// nothing of the daemon's machinery: no engine, agent, raft, gossip or
// state machine (Tailscale's depaware idea, as a rule instead of a list).
func TestFencectlLinks(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/fencectl").Output()
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/fenced/fenced/"
	want := map[string]bool{"cmd/fencectl": true, "cmd/internal/docgen": true, "daemon/api": true, "daemon/apiclient": true, "stonith/fencing": true,
		"daemon/api/timeline": true} // the timeline drawn from the history's records: fencing's types and the standard library
	for _, dep := range strings.Fields(string(out)) {
		if p, ok := strings.CutPrefix(dep, mod); ok && !want[p] {
			t.Errorf("fencectl links %s", dep)
		}
		for _, bad := range []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/bougou/go-ipmi",
			"github.com/stmcginnis/gofish", "github.com/gosnmp/gosnmp", "go.etcd.io/bbolt"} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("fencectl links %s", dep)
			}
		}
	}
}

// TestProductLinksNoSimulator: the packaged programs (fenced, fencectl)
// link none of the simulators, harnesses or test-only fault injection:
// those live in fenced-lab and the tests.
func TestProductLinksNoSimulator(t *testing.T) {
	sims := []string{
		"github.com/fenced/fenced/agents/ipmi/ipmisim",
		"github.com/fenced/fenced/agents/redfish/redfishsim",
		"github.com/fenced/fenced/agents/san/fabricsim",
		"github.com/fenced/fenced/agents/pdu/pdutest",
		"github.com/fenced/fenced/daemon/storage/tokenstore",
		"github.com/fenced/fenced/harness/devcluster",
		"github.com/fenced/fenced/harness",
	}
	for _, cmd := range []string{"../cmd/fenced", "../cmd/fencectl"} {
		out, err := exec.Command("go", "list", "-deps", cmd).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, s := range sims {
				if dep == s || strings.HasPrefix(dep, s+"/") {
					t.Errorf("%s links %s", cmd, dep)
				}
			}
		}
	}
	// Fault injection is compiled in only with -tags faultinject.
	bin := t.TempDir() + "/fenced"
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/fenced").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "FENCED_FAULT_STALL_AFTER") {
		t.Error("the product binary contains the fault injection")
	}
}
