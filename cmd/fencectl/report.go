package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/apiclient"
)

// timeoutReport: the daemon waits up to 20s for each node's part, then
// streams the bundle.
const timeoutReport = 90 * time.Second

func init() {
	extraCommands = append(extraCommands, func(a *app) *cobra.Command {
		var since, file string
		cmd := &cobra.Command{
			Use:   "report",
			Short: "Write a diagnostics bundle of every reachable node",
			Long: `Write one archive (tar.gz) with what a support engineer asks for first, from
every configured node the cluster can reach, the way crm_report and sosreport
do. The local daemon asks each node for its part, through the cluster, and
each node makes its own: its configuration file with every secret replaced
by <redacted>, its status, the fence history, its raft and gossip views,
device health, its version and build, and the daemon's log for --since (the
journal of its unit under systemd, else the lines the daemon keeps in
memory, about 1 MiB). Every secret of the configuration (the passwords and
communities, the contents of their files and of the gossip key file) is
scrubbed from every file, the logs included.

The archive holds fenced-report-CLUSTER-TIME/, with README.txt (what is
where), index.json (every node: its files, or why it is missing) and a
directory per node that answered. A node that does not answer within 20s is
listed as unreachable with the reason; the command still writes the bundle
and succeeds. Each node's part is at most 2 MiB compressed: a longer log
loses its oldest lines, said in the node's part.json.

-o names the archive to write (here -o is not the output format): by
default fenced-report-CLUSTER-TIME.tar.gz in the working directory, and -
writes it to stdout (the summary then goes to stderr). The file is created
mode 0600.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return a.report(cmd.Context(), since, file)
			},
		}
		cmd.Flags().StringVar(&since, "since", "2h", "the logs' period: a duration back from now (30m, 2h, 3d) or an RFC 3339 time")
		// A local -o/--output shadows the persistent output format on
		// this command only (cobra merges a parent's persistent flag
		// into a command only where no flag of that name exists).
		cmd.Flags().StringVarP(&file, "output", "o", "", "the archive to write, - for stdout (default fenced-report-CLUSTER-TIME.tar.gz here)")
		return withTimeout(cmd, timeoutReport)
	})
}

func (a *app) report(ctx context.Context, since, file string) error {
	if file == "json" || file == "table" {
		return &exitError{code: exitUsage, err: fmt.Errorf("-o %q: for report, -o names the archive to write, not an output format (to write a file of that name, give ./%s)", file, file)}
	}
	from, err := parseSince(since, time.Now())
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	c := apiclient.New(a.socket)
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, a.reqTimeout)
	defer cancel()
	body, err := c.Get(rctx, "/v1/report", url.Values{"since": {from.UTC().Format(time.RFC3339)}})
	if err != nil {
		return a.callError(ctx, err)
	}
	defer body.Close()

	// The bundle goes to a temporary file beside the one named, renamed
	// once it is whole: an interrupted report leaves no half archive.
	var dst io.Writer = a.out
	var tmp *os.File
	into := "" // -o names a directory: the default name in it
	if file != "-" {
		dir := "."
		if fi, err := os.Stat(file); file != "" && err == nil && fi.IsDir() {
			dir, into, file = file, file, ""
		} else if file != "" {
			dir = filepath.Dir(file)
		}
		if tmp, err = os.CreateTemp(dir, ".fenced-report-*.tmp"); err != nil {
			return &exitError{code: exitFailure, err: fmt.Errorf("report: %w", err)}
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		dst = tmp
	}
	cw := &countWriter{w: dst}
	top, ix, err := readBundle(io.TeeReader(&capReader{r: body, n: reportArchiveMax}, cw))
	if err != nil {
		if cerr := a.callError(ctx, err); ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return cerr
		}
		return &exitError{code: exitFailure, err: fmt.Errorf("report: the daemon's archive: %w", err)}
	}
	name := "-"
	if tmp != nil {
		name = file
		if name == "" {
			name = filepath.Join(into, top+".tar.gz")
		}
		if err := tmp.Close(); err != nil {
			return &exitError{code: exitFailure, err: fmt.Errorf("report: %s: %w", name, err)}
		}
		if err := os.Rename(tmp.Name(), name); err != nil {
			return &exitError{code: exitFailure, err: fmt.Errorf("report: %w", err)}
		}
		tmp = nil
	}
	sum := a.out
	if file == "-" {
		sum = a.errw
	}
	printReportSummary(sum, ix, name, cw.n)
	return nil
}

// readBundle reads the whole archive (checking it is one) and returns its
// top directory and its index.json.
func readBundle(r io.Reader) (string, api.ReportIndexDoc, error) {
	var ix api.ReportIndexDoc
	zr, err := gzip.NewReader(r)
	if err != nil {
		return "", ix, err
	}
	tr := tar.NewReader(zr)
	top, found := "", false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", ix, err
		}
		first, _, _ := strings.Cut(h.Name, "/")
		if top == "" {
			top = first
		}
		if first != top || !strings.HasPrefix(top, "fenced-report-") {
			return "", ix, fmt.Errorf("entry %q outside the bundle's directory", api.EscapeText(h.Name))
		}
		if h.Name == path.Join(top, api.ReportIndex) {
			if err := json.NewDecoder(tr).Decode(&ix); err != nil {
				return "", ix, fmt.Errorf("%s: %w", h.Name, err)
			}
			found = true
		}
	}
	// The rest of the stream (gzip's trailer) reaches the file too.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return "", ix, err
	}
	if !found {
		return "", ix, fmt.Errorf("no %s", api.ReportIndex)
	}
	return top, ix, nil
}

func printReportSummary(w io.Writer, ix api.ReportIndexDoc, name string, size int64) {
	got := 0
	for _, n := range ix.Nodes {
		if n.Unreachable != "" {
			fmt.Fprintf(w, "%-12s unreachable: %s\n", cell(n.Name), cell(n.Unreachable))
			continue
		}
		got++
		fmt.Fprintf(w, "%-12s included (log: %s)\n", cell(n.Name), cell(n.LogSource))
		for _, note := range n.Notes {
			fmt.Fprintf(w, "%-12s   note: %s\n", "", cell(note))
		}
	}
	where := name
	if name == "-" {
		where = "stdout"
	}
	fmt.Fprintf(w, "wrote %s (%s, %d of %d nodes)\n", where, sizeText(size), got, len(ix.Nodes))
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// reportArchiveMax bounds the archive fencectl writes (a daemon's parts
// are 2 MiB each): a broken answer must not fill the disk.
const reportArchiveMax = 1 << 30

// capReader fails once more than n bytes were read.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, fmt.Errorf("archive over %d MiB", reportArchiveMax>>20)
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// countWriter counts what passes through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
