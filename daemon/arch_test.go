package daemon_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestArchitecture keeps the layering of DESIGN.md: every package has a doc
// comment; agents know nothing of the cluster; the fencing engine knows
// agents only; quorum knows neither the daemon nor the agents.
func TestArchitecture(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Doc}}|{{join .Imports \",\"}}", "github.com/fenced/fenced/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/fenced/fenced/"
	forbidden := map[string][]string{
		"agents":  {"daemon", "quorum", "stonith", "cmd"},
		"stonith": {"daemon", "quorum", "cmd"},
		"quorum":  {"daemon", "agents", "cmd"},
		"daemon":  {"cmd"},
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 3)
		pkg, doc, imports := strings.TrimPrefix(f[0], mod), f[1], strings.Split(f[2], ",")
		if doc == "" {
			t.Errorf("package %s has no doc comment", pkg)
		}
		top := strings.SplitN(pkg, "/", 2)[0]
		for _, imp := range imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.SplitN(strings.TrimPrefix(imp, mod), "/", 2)[0]
			for _, bad := range forbidden[top] {
				if dep == bad {
					t.Errorf("%s imports %s: %s must not depend on %s", pkg, imp, top, bad)
				}
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
