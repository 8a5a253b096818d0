package docgen

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func testTree() *cobra.Command {
	root := &cobra.Command{Use: "tool", Short: "A tool"}
	root.CompletionOptions.HiddenDefaultCmd = true
	run := &cobra.Command{Use: "run", Short: "Run it", Example: "  tool run --config /etc/tool.yaml", RunE: func(*cobra.Command, []string) error { return nil }}
	run.Flags().String("config", "/etc/tool.yaml", "configuration file")
	dev := &cobra.Command{Use: "device", Short: "Devices"}
	dev.AddCommand(&cobra.Command{Use: "list", Short: "List devices", RunE: func(*cobra.Command, []string) error { return nil }})
	secret := &cobra.Command{Use: "sim", Short: "Simulators", Hidden: true, RunE: func(*cobra.Command, []string) error { return nil }}
	root.AddCommand(run, dev, secret, Command("1.2.3", "8", Extras{
		Files:   [][2]string{{"/etc/tool.yaml", "The configuration."}, {".hidden", "A path starting with a dot."}},
		SeeAlso: []string{"tool.yaml(5)", "other(1)"},
	}))
	return root
}

func runTool(t *testing.T, args ...string) error {
	t.Helper()
	root := testTree()
	root.SetArgs(args)
	root.SetOut(new(bytes.Buffer))
	root.SetErr(new(bytes.Buffer))
	return root.Execute()
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// One page per visible command, none for hidden ones (sim, gen-docs) or
// cobra's help and completion; the footer carries the version and the
// SOURCE_DATE_EPOCH date, so two runs give the same bytes.
func TestManPagesCoverVisibleCommandsOnly(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	man, compl := t.TempDir(), t.TempDir()
	if err := runTool(t, "gen-docs", "--man", man, "--completions", compl); err != nil {
		t.Fatal(err)
	}
	got := names(t, man)
	want := []string{"tool-device-list.8", "tool-device.8", "tool-run.8", "tool.8"}
	if !slices.Equal(got, want) {
		t.Fatalf("man pages %v, want %v", got, want)
	}
	page, err := os.ReadFile(filepath.Join(man, "tool-run.8"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`.TH "TOOL-RUN" "8" "Nov 2023" "tool 1.2.3" "tool manual"`, "config", "/etc/tool.yaml", `\fBtool(8)\fP`} {
		if !strings.Contains(string(page), s) {
			t.Errorf("tool-run.8 lacks %q:\n%s", s, page)
		}
	}
	// EXAMPLES (as man-pages(7) names it), FILES, and SEE ALSO with the
	// pages outside the tree after the tree's own.
	for _, s := range []string{".SH EXAMPLES\n.EX\n  tool run --config /etc/tool.yaml\n.EE\n",
		".SH FILES\n.TP\n\\fI/etc/tool.yaml\\fP\nThe configuration.\n.TP\n\\fI\\&.hidden\\fP\n",
		".SH SEE ALSO\n\\fBtool(8)\\fP, \\fBtool.yaml(5)\\fP, \\fBother(1)\\fP\n"} {
		if !strings.Contains(string(page), s) {
			t.Errorf("tool-run.8 lacks %q:\n%s", s, page)
		}
	}
	if strings.Index(string(page), ".SH FILES") > strings.Index(string(page), ".SH SEE ALSO") {
		t.Errorf("FILES after SEE ALSO:\n%s", page)
	}
	if strings.Contains(string(page), "Auto generated") {
		t.Errorf("tool-run.8 carries cobra's dated trailer:\n%s", page)
	}
	if got := names(t, compl); !slices.Equal(got, []string{"tool.bash", "tool.fish", "tool.zsh"}) {
		t.Fatalf("completions %v", got)
	}
	for _, f := range []string{"tool.bash", "tool.fish", "tool.zsh"} {
		b, err := os.ReadFile(filepath.Join(compl, f))
		if err != nil || !strings.Contains(string(b), "__complete") {
			t.Errorf("%s: not a cobra completion script (err %v)", f, err)
		}
	}

	again := t.TempDir()
	if err := runTool(t, "gen-docs", "--man", again); err != nil {
		t.Fatal(err)
	}
	for _, f := range want {
		a, _ := os.ReadFile(filepath.Join(man, f))
		b, _ := os.ReadFile(filepath.Join(again, f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs", f)
		}
	}
}

func TestGenDocsErrors(t *testing.T) {
	if err := runTool(t, "gen-docs"); err == nil || !strings.Contains(err.Error(), "nothing to do") {
		t.Errorf("no directories: %v", err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if err := runTool(t, "gen-docs", "--man", t.TempDir()); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if err := runTool(t, "gen-docs", "--completions", file); err == nil || !strings.Contains(err.Error(), "completions") {
		t.Errorf("completions dir is a file: %v", err)
	}
}
