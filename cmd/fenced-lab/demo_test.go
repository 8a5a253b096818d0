package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemo runs `fenced-lab demo` exactly as `make demo` does, with freshly
// built binaries, and checks its timeline.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a 3-node cluster")
	}
	bin := t.TempDir()
	for _, c := range []string{"fenced", "fencectl", "fenced-lab"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, c), "../"+c).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", c, err, out)
		}
	}
	out, err := exec.Command(filepath.Join(bin, "fenced-lab"), "demo", "--bin", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`elected: node\d is primary with epoch (\d+)`),
		regexp.MustCompile(`pausing node\d with SIGSTOP`),
		regexp.MustCompile(`fenced node\d via IPMI \(node\d-bmc\): power off, read back "off" in \d+ ms`),
		regexp.MustCompile(`storage started on node\d with epoch \d+`),
		regexp.MustCompile(`late write from node\d carrying epoch \d+ arrives: REJECTED`),
		regexp.MustCompile(`no two holders overlapped, no stale epoch accepted`),
		regexp.MustCompile(`\$ fencectl status\n`),
		regexp.MustCompile(`fence +node\d +off +SUCCESS`),
	} {
		if !want.MatchString(s) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "panic") {
		t.Errorf("panic in demo output:\n%s", s)
	}
}
