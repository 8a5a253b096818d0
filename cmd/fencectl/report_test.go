package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/api"
)

// fakeBundle is an archive as the daemon writes it: index.json first.
func fakeBundle(t *testing.T, top string) []byte {
	t.Helper()
	ix := api.ReportIndexDoc{SchemaVersion: 1, Cluster: "dev", CollectedBy: "node1", Nodes: []api.ReportNode{
		{Name: "node1", Files: []string{"status.json"}, LogSource: api.LogMemory, Notes: []string{"fenced.log: starts later"}},
		{Name: "node2", Unreachable: "forward to node2: node not reachable (gossip: dead)"},
	}}
	ixj, _ := json.Marshal(ix)
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, f := range [][2]string{{top + "/index.json", string(ixj)}, {top + "/node1/status.json", "{}"}} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f[0], Size: int64(len(f[1])), Mode: 0o644})
		tw.Write([]byte(f[1]))
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

// reportDaemon answers GET /v1/report with body, and records the query.
func reportDaemon(t *testing.T, body []byte) (sock string, since *string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	since = new(string)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/report" {
			http.NotFound(w, r)
			return
		}
		*since = r.URL.Query().Get("since")
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, since
}

func runIn(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(dir)
	var out, errw bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(""), &out, &errw)
	return code, out.String(), errw.String()
}

// fencectl report writes the archive under its own name in the working
// directory (or a directory -o names), mode 0600, and prints each node:
// included, or unreachable with the reason.
func TestReportWritesBundle(t *testing.T) {
	top := "fenced-report-dev-20261203T100000Z"
	bundle := fakeBundle(t, top)
	sock, since := reportDaemon(t, bundle)
	wd := t.TempDir()
	before := time.Now()
	code, out, errw := runIn(t, wd, "-s", sock, "report", "--since", "30m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errw)
	}
	got, err := os.ReadFile(filepath.Join(wd, top+".tar.gz"))
	if err != nil || !bytes.Equal(got, bundle) {
		t.Fatalf("archive: %v (%d bytes, want %d)", err, len(got), len(bundle))
	}
	if fi, _ := os.Stat(filepath.Join(wd, top+".tar.gz")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if s, err := time.Parse(time.RFC3339, *since); err != nil || s.Before(before.Add(-31*time.Minute)) || s.After(before.Add(-29*time.Minute)) {
		t.Errorf("since sent: %q", *since)
	}
	for _, want := range []string{"node1        included (log: memory)", "note: fenced.log: starts later", "node2        unreachable: forward to node2: node not reachable (gossip: dead)",
		"wrote " + top + ".tar.gz", "1 of 2 nodes"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if ents, _ := os.ReadDir(wd); len(ents) != 1 {
		t.Errorf("working directory holds %d entries, want the archive only", len(ents))
	}

	// -o a directory: the archive's own name in it; -o -: stdout.
	sub := t.TempDir()
	if code, out, errw := runIn(t, wd, "-s", sock, "report", "-o", sub); code != 0 || !strings.Contains(out, "wrote "+filepath.Join(sub, top+".tar.gz")) {
		t.Errorf("-o DIR: exit %d: %s%s", code, out, errw)
	}
	code, out, errw = runIn(t, wd, "-s", sock, "report", "-o", "-")
	if code != 0 || out != string(bundle) || !strings.Contains(errw, "wrote stdout") {
		t.Errorf("-o -: exit %d, %d bytes on stdout, stderr %q", code, len(out), errw)
	}
}

// A broken archive fails and leaves no file; -o json is not taken for a
// file name.
func TestReportRefuses(t *testing.T) {
	bundle := fakeBundle(t, "fenced-report-dev-20261203T100000Z")
	sock, _ := reportDaemon(t, bundle[:len(bundle)/2])
	wd := t.TempDir()
	code, _, errw := runIn(t, wd, "-s", sock, "report")
	if code != exitFailure || !strings.Contains(errw, "the daemon's archive") {
		t.Errorf("truncated archive: exit %d: %s", code, errw)
	}
	if ents, _ := os.ReadDir(wd); len(ents) != 0 {
		t.Errorf("a truncated archive left %v", ents)
	}
	outside, _ := reportDaemon(t, fakeBundle(t, "etc"))
	if code, _, errw := runIn(t, wd, "-s", outside, "report"); code != exitFailure || !strings.Contains(errw, "outside the bundle") {
		t.Errorf("archive outside fenced-report-*: exit %d: %s", code, errw)
	}
	for _, o := range []string{"json", "table"} {
		if code, _, errw := runIn(t, wd, "-s", sock, "report", "-o", o); code != exitUsage || !strings.Contains(errw, "not an output format") {
			t.Errorf("-o %s: exit %d: %s", o, code, errw)
		}
	}
}
