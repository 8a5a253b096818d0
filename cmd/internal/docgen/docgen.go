// Package docgen writes the man pages and shell completions of a cobra
// command tree. The packages ship what it generates from the built binaries
// (the hidden `gen-docs` command of fenced and fencectl), so the pages and
// completions cannot drift from the commands.
package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Extras are what every page of a tree gets beside what cobra writes (its
// options, its examples, the pages of the commands around it): the files
// the program uses, as a FILES section, and the related pages outside the
// tree, added to SEE ALSO.
type Extras struct {
	// Files are path → what, in order.
	Files [][2]string
	// SeeAlso are pages such as "fenced.yaml(5)".
	SeeAlso []string
}

// Command returns the hidden `gen-docs` command, which documents the root of
// the tree it is added to. version goes into the man pages' footer; section
// is the manual section of every page of the tree: "8" for a daemon and its
// administration commands, "1" for user commands.
func Command(version, section string, extras Extras) *cobra.Command {
	var manDir, complDir string
	cmd := &cobra.Command{
		Use:    "gen-docs --man DIR --completions DIR",
		Short:  "Write man pages and shell completions (for packaging)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manDir == "" && complDir == "" {
				return fmt.Errorf("gen-docs: nothing to do: give --man DIR and/or --completions DIR")
			}
			root := cmd.Root()
			if manDir != "" {
				date, err := SourceDate()
				if err != nil {
					return err
				}
				if err := WriteMan(root, version, section, date, manDir, extras); err != nil {
					return err
				}
			}
			if complDir != "" {
				if err := WriteCompletions(root, complDir); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&manDir, "man", "", "directory for the man pages (NAME."+section+", NAME-SUB."+section+", ...)")
	cmd.Flags().StringVar(&complDir, "completions", "", "directory for NAME.bash, NAME.zsh and NAME.fish")
	return cmd
}

// SourceDate is the date the man pages show: SOURCE_DATE_EPOCH when set (the
// packaging sets it to the commit time, so rebuilding gives the same bytes),
// else today.
func SourceDate() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Now().UTC(), nil
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("gen-docs: SOURCE_DATE_EPOCH %q: want seconds since 1970", v)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// WriteMan writes one page of the given manual section per visible command
// of root's tree into dir (hidden commands such as `sim` and `gen-docs` get
// none), each with the sections cobra writes — its EXAMPLE section named
// EXAMPLES, as man-pages(7) has it — and extras' FILES and SEE ALSO.
func WriteMan(root *cobra.Command, version, section string, date time.Time, dir string, extras Extras) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gen-docs: man pages: %w", err)
	}
	// The "Auto generated" trailer would carry a second, unpinned date.
	disableAutoGenTag(root)
	header := &doc.GenManHeader{
		Section: section,
		Date:    &date,
		Source:  root.Name() + " " + version,
		Manual:  root.Name() + " manual",
	}
	var write func(c *cobra.Command) error
	write = func(c *cobra.Command) error {
		if !c.IsAvailableCommand() && c != root {
			return nil
		}
		for _, sub := range c.Commands() {
			if err := write(sub); err != nil {
				return err
			}
		}
		var b bytes.Buffer
		// GenMan fills the header in; pass each page a copy.
		h := *header
		if err := doc.GenMan(c, &h, &b); err != nil {
			return err
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + "." + section
		return os.WriteFile(filepath.Join(dir, name), withExtras(b.Bytes(), extras), 0o644)
	}
	if err := write(root); err != nil {
		return fmt.Errorf("gen-docs: man pages in %s: %w", dir, err)
	}
	return nil
}

// withExtras edits a page cobra wrote: EXAMPLE becomes EXAMPLES, and the
// FILES section and the further SEE ALSO entries are added before and to
// its SEE ALSO section (which it ends with).
func withExtras(page []byte, x Extras) []byte {
	s := strings.Replace(string(page), "\n.SH EXAMPLE\n", "\n.SH EXAMPLES\n", 1)
	var files strings.Builder
	if len(x.Files) > 0 {
		files.WriteString(".SH FILES\n")
		for _, f := range x.Files {
			fmt.Fprintf(&files, ".TP\n\\fI%s\\fP\n%s\n", manEscape(f[0]), manEscape(f[1]))
		}
		files.WriteString("\n")
	}
	var also []string
	for _, p := range x.SeeAlso {
		also = append(also, "\\fB"+manEscape(p)+"\\fP")
	}
	const seeAlso = ".SH SEE ALSO\n"
	before, after, found := strings.Cut(s, seeAlso)
	if !found {
		if len(also) == 0 {
			return []byte(s + files.String())
		}
		return []byte(s + files.String() + seeAlso + strings.Join(also, ", ") + "\n")
	}
	line, rest, _ := strings.Cut(after, "\n")
	if len(also) > 0 {
		line = strings.TrimSpace(line)
		if line != "" {
			line += ", "
		}
		line += strings.Join(also, ", ")
	}
	return []byte(before + files.String() + seeAlso + line + "\n" + rest)
}

// manEscape escapes what roff would read as commands: a backslash, and a
// dot or quote at the start of a line.
func manEscape(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\e")
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = "\\&" + s
	}
	return s
}

func disableAutoGenTag(c *cobra.Command) {
	c.DisableAutoGenTag = true
	for _, sub := range c.Commands() {
		disableAutoGenTag(sub)
	}
}

// WriteCompletions writes root's bash, zsh and fish completion scripts into
// dir as NAME.bash, NAME.zsh and NAME.fish.
func WriteCompletions(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gen-docs: completions: %w", err)
	}
	name := root.Name()
	gens := []struct {
		ext string
		gen func(string) error
	}{
		{"bash", func(p string) error { return root.GenBashCompletionFileV2(p, true) }},
		{"zsh", root.GenZshCompletionFile},
		{"fish", func(p string) error { return root.GenFishCompletionFile(p, true) }},
	}
	for _, g := range gens {
		p := filepath.Join(dir, name+"."+g.ext)
		if err := g.gen(p); err != nil {
			return fmt.Errorf("gen-docs: %s completion %s: %w", g.ext, p, err)
		}
	}
	return nil
}
