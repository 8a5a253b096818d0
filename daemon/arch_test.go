package daemon_test

import (
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
