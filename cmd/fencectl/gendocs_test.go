package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// `fencectl gen-docs` (what the packages ship) writes a page for every
// visible command of the real tree, nested ones included, and none for
// hidden ones.
func TestGenDocsCoversCommandTree(t *testing.T) {
	man, compl := t.TempDir(), t.TempDir()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"gen-docs", "--man", man, "--completions", compl}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("gen-docs: exit %d: %s", code, errOut.String())
	}
	var want []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		want = append(want, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(&app{out: &out, errw: &errOut, in: strings.NewReader("")}))
	slices.Sort(want)
	if !slices.Contains(want, "fencectl-device-list.1") || slices.Contains(want, "fencectl-gen-docs.1") {
		t.Fatalf("visible commands: %v", want)
	}
	ents, err := os.ReadDir(man)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("man pages %v\nwant %v", got, want)
	}
	for _, f := range []string{"fencectl.bash", "fencectl.zsh", "fencectl.fish"} {
		if fi, err := os.Stat(compl + "/" + f); err != nil || fi.Size() == 0 {
			t.Errorf("completion %s: %v", f, err)
		}
	}
}
