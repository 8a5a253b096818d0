// Command fencedyaml writes fenced.yaml(5), the man page of fenced's
// configuration file, from daemon/config: its keys and defaults from
// config.Default() and the config structs, its prose from their doc
// comments. The packaging runs it at build time, inside the module:
//
//	go run ./cmd/internal/docgen/fencedyaml --version VERSION --out DIR
//
// so the page cannot drift from the configuration it describes.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fenced/fenced/cmd/internal/docgen"
	"github.com/fenced/fenced/cmd/internal/docgen/configdoc"
	"github.com/fenced/fenced/daemon/config"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fencedyaml:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencedyaml", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "fenced version for the page footer (required)")
	out := fs.String("out", "", "directory to write fenced.yaml.5 into (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || *out == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: fencedyaml --version VERSION --out DIR")
	}
	page, err := Page(*version)
	if err != nil {
		return err
	}
	b, err := page.Generate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "fenced.yaml.5"), b, 0o644)
}

// Page describes fenced.yaml(5); its date is SOURCE_DATE_EPOCH's (else
// today), as for the commands' pages.
func Page(version string) (*configdoc.Page, error) {
	date, err := docgen.SourceDate()
	if err != nil {
		return nil, err
	}
	return &configdoc.Page{
		Name:     "fenced.yaml",
		Section:  "5",
		Title:    "configuration file of the fenced fencing daemon",
		Source:   "fenced " + version,
		Manual:   "fenced manual",
		Date:     date,
		Synopsis: "/etc/fenced/fenced.yaml",
		Description: []string{
			"fenced(8) reads its configuration from one YAML file: " +
				"/etc/fenced/fenced.yaml, unless fenced run --config names another. " +
				"Every key is described below, with its type and the default a file that leaves it out gets.",
			"The file is read strictly: an unknown key, a value of the wrong type or a broken rule " +
				"(such as the relations between the timing keys) stops fenced at start with every problem " +
				"listed as FILE:LINE: PATH: MESSAGE. fenced validate --config FILE runs the same checks " +
				"without starting anything.",
			"Keys are written with their full path: timing.lease is the key lease inside the mapping timing; " +
				"nodes[].gossip is the key gossip in every entry of the list nodes; " +
				"devices.NAME.agent is the key agent in every entry of the mapping devices, " +
				"whose keys (NAME) are names the file chooses. " +
				"Durations are written as a number and a unit, such as 250ms, 3s or 1m30s.",
		},
		Files: [][2]string{
			{"/etc/fenced/fenced.yaml", "The configuration. The packages install a commented sample for a 3-node cluster, which is kept on upgrade."},
		},
		SeeAlso: []string{"fenced(8)", "fenced-run(8)", "fenced-validate(8)", "fencectl(1)"},
		Root:    config.Default(),
	}, nil
}
