package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// `fenced gen-docs` (what the packages ship) writes a page for every visible
// command of the real tree and none for hidden ones, and completions that
// know the subcommands.
func TestGenDocsCoversCommandTree(t *testing.T) {
	man, compl := t.TempDir(), t.TempDir()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"gen-docs", "--man", man, "--completions", compl}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("gen-docs: exit %d: %s", code, errOut.String())
	}
	root := newRootCmd(context.Background(), &stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	want := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		want[strings.ReplaceAll(c.CommandPath(), " ", "-")+".8"] = true
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, must := range []string{"fenced.8", "fenced-run.8", "fenced-validate.8", "fenced-version.8"} {
		if !want[must] {
			t.Fatalf("the tree lacks %s; visible: %v", must, want)
		}
	}
	ents, err := os.ReadDir(man)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !want[e.Name()] {
			t.Errorf("unexpected man page %s (hidden or unknown command)", e.Name())
		}
		delete(want, e.Name())
	}
	for name := range want {
		t.Errorf("no man page %s", name)
	}
	bash, err := os.ReadFile(filepath.Join(compl, "fenced.bash"))
	if err != nil || !strings.Contains(string(bash), "fenced") {
		t.Fatalf("bash completion: %v", err)
	}
}
