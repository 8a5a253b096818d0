package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fenced/fenced/agents"
)

// Every visible command has examples, and every page the packages ship
// has EXAMPLES, FILES and SEE ALSO sections.
func TestManPageSections(t *testing.T) {
	man := t.TempDir()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"gen-docs", "--man", man}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("gen-docs: exit %d: %s", code, errOut.String())
	}
	pages, _ := filepath.Glob(filepath.Join(man, "*.8"))
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

// Every example is true to the command tree: each line that runs fenced
// names a command that exists, with flags it takes and as many arguments
// as it accepts.
func TestExamplesParse(t *testing.T) {
	root := newRootCmd(context.Background(), &stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
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

// checkAgentExample checks a `fenced agent NAME ...` example: the agent is
// built in, each --name=value names one of its parameters, and -o names
// an action the FenceAgentAPI has.
func checkAgentExample(t *testing.T, where, line string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: example %q: no agent", where, line)
		return
	}
	k, ok := agents.Default.Lookup(args[0])
	if !ok {
		t.Errorf("%s: example %q: no agent %q", where, line, args[0])
		return
	}
	p := agents.Params{}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o" && i+1 < len(args):
			i++
			if !slices.Contains([]string{"on", "off", "reboot", "status", "monitor", "list", "metadata", "validate-all"}, args[i]) {
				t.Errorf("%s: example %q: no action %q", where, line, args[i])
			}
		case strings.HasPrefix(a, "--"):
			name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			p[name] = value
		default:
			t.Errorf("%s: example %q: %q is not an option", where, line, a)
		}
	}
	if u := agents.Undeclared(p, k.Params); len(u) > 0 {
		t.Errorf("%s: example %q: agent %s takes no %v", where, line, args[0], u)
	}
}
