// Package docgen writes the man pages and shell completions of a cobra
// command tree. The packages ship what it generates from the built binaries
// (the hidden `gen-docs` command of fenced and fencectl), so the pages and
// completions cannot drift from the commands.
package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Command returns the hidden `gen-docs` command, which documents the root of
// the tree it is added to. version goes into the man pages' footer; section
// is the manual section of every page of the tree: "8" for a daemon and its
// administration commands, "1" for user commands.
func Command(version, section string) *cobra.Command {
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
				if err := WriteMan(root, version, section, date, manDir); err != nil {
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
// none).
func WriteMan(root *cobra.Command, version, section string, date time.Time, dir string) error {
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
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("gen-docs: man pages in %s: %w", dir, err)
	}
	return nil
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
