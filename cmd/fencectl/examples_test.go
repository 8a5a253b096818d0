package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every visible command has examples, and every page the packages ship
// has EXAMPLES, FILES and SEE ALSO sections.
func TestManPageSections(t *testing.T) {
	man := t.TempDir()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"gen-docs", "--man", man}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("gen-docs: exit %d: %s", code, errOut.String())
	}
	pages, _ := filepath.Glob(filepath.Join(man, "*.1"))
	if len(pages) == 0 {
		t.Fatal("no pages")
	}
	for _, p := range pages {
		b, _ := os.ReadFile(p)
		for _, sh := range []string{".SH EXAMPLES\n", ".SH FILES\n", ".SH SEE ALSO\n"} {
			if !bytes.Contains(b, []byte(sh)) {
				t.Errorf("%s has no %s section", filepath.Base(p), strings.TrimSpace(strings.TrimPrefix(sh, ".SH ")))
			}
		}
	}
}

// Every example is true to the command tree: each line that runs fencectl
// names a command that exists, with flags it takes and as many arguments
// as it accepts.
func TestExamplesParse(t *testing.T) {
	root := newRootCmd(&app{out: io.Discard, errw: io.Discard, in: strings.NewReader(""), output: "table"})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c != root {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no examples", c.CommandPath())
		}
		for _, line := range strings.Split(c.Example, "\n") {
			checkExample(t, root, c.CommandPath(), line)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func checkExample(t *testing.T, root *cobra.Command, where, line string) {
	t.Helper()
	line = strings.TrimSpace(line)
	if _, piped, ok := strings.Cut(line, "| "); ok {
		line = piped // the command a pipe feeds
	}
	words := shellWords(line)
	if len(words) == 0 || words[0] != root.Name() {
		return // a comment, or another program (systemctl)
	}
	cmd, rest, err := root.Find(words[1:])
	if err != nil || cmd == root && len(rest) > 0 {
		t.Errorf("%s: example %q: no such command (%v)", where, line, err)
		return
	}
	if cmd.DisableFlagParsing {
		checkAgentExample(t, where, line, rest)
		return
	}
	// Find leaves the flags in rest; parse them as cobra will.
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: example %q: %v", where, line, err)
		return
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Errorf("%s: example %q: %v", where, line, err)
	}
	cmd.Flags().Visit(func(f *pflag.Flag) { _ = f.Value.Set(f.DefValue) })
}

// shellWords splits a command line as sh would a simple one: spaces, and
// single or double quotes.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// fencectl has no command that takes options of its own kind.
func checkAgentExample(t *testing.T, where, line string, _ []string) {
	t.Errorf("%s: example %q: a command without flag parsing", where, line)
}
