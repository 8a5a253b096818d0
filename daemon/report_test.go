package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/logring"
	"github.com/fenced/fenced/quorum"
)

// The secrets a part is scrubbed of: inline values, the contents of the
// _file forms and of the gossip key (whole and by line), and their JSON
// and Go-quoted forms; a longer secret holding a shorter one is scrubbed
// whole.
func TestReportSecretsScrub(t *testing.T) {
	c := config.Default()
	c.Gossip.KeyFile = "/k/gossip.key"
	c.Devices = map[string]config.Device{
		"a": {Agent: "ipmi", Params: map[string]string{"username": "admin", "password": `pa"ss<1>`}},
		"b": {Agent: "ipmi", Params: map[string]string{"password_file": "/k/pw", "password_script": "/bin/echo no"}},
		"c": {Agent: "ipmi", Params: map[string]string{"password": "pa\"ss<1>-longer"}},
	}
	files := map[string]string{"/k/gossip.key": "S2V5S2V5S2V5\n", "/k/pw": "filesecret\nsecond-line\n"}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	secrets := reportSecrets(read, c, nil)
	for _, want := range []string{`pa"ss<1>`, `pa\"ss\u003c1\u003e`, `pa\"ss<1>`, "S2V5S2V5S2V5", "filesecret", "second-line", "filesecret\nsecond-line"} {
		found := false
		for _, s := range secrets {
			found = found || s == want
		}
		if !found {
			t.Errorf("secret %q not among %q", want, secrets)
		}
	}
	for _, s := range secrets {
		if strings.Contains(s, "admin") || strings.Contains(s, "/bin/echo") {
			t.Errorf("not a secret: %q", s)
		}
	}
	js, _ := json.Marshal(map[string]string{"error": `auth failed for pa"ss<1>`})
	in := "password=" + strconvQuote(`pa"ss<1>-longer`) + " key S2V5S2V5S2V5 pw filesecret\n" + string(js)
	out := string(scrubSecrets([]byte(in), secrets))
	for _, s := range []string{`\u003c1`, "<1>", "S2V5", "filesecret", "longer"} {
		if strings.Contains(out, s) {
			t.Errorf("scrubbed text still holds %q: %s", s, out)
		}
	}
	if strings.Count(out, config.Redacted) != 4 {
		t.Errorf("want 4 redactions: %s", out)
	}
}

// What a secret's _script form prints is scrubbed too: what it prints now
// (the script is run for the report) and what it printed before in this
// process (a rotated password in an older log line).
func TestReportSecretsScrubScripts(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "pw.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'scr1pt-old-s3cret'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	// An agent resolved the password before it was rotated.
	if v, err := (agents.Params{"password_script": script}).Secret(context.Background(), "password"); err != nil || v != "scr1pt-old-s3cret" {
		t.Fatalf("resolved %q, %v", v, err)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'scr1pt-new-s3cret'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.Devices = map[string]config.Device{"a": {Agent: "ipmi", Params: map[string]string{"username": "admin", "password_script": script}}}
	secrets := reportSecrets(os.ReadFile, c)
	out := string(scrubSecrets([]byte("login failed: scr1pt-old-s3cret\nlogin as admin with \"scr1pt-new-s3cret\"\n"), secrets))
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "admin") || strings.Count(out, config.Redacted) != 2 {
		t.Fatalf("scrubbed: %q (secrets %q)", out, secrets)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// A part over its bound loses its log's oldest lines first, then its
// largest other files, and says so in part.json.
func TestPackPartCuts(t *testing.T) {
	var log bytes.Buffer
	for i := 0; log.Len() < 1<<20; i++ {
		b := make([]byte, 40)
		rand.Read(b)
		fmt.Fprintf(&log, "line %d %s\n", i, hex.EncodeToString(b))
	}
	newest := log.String()[strings.LastIndex(strings.TrimSuffix(log.String(), "\n"), "\n")+1:]
	part := api.ReportPart{SchemaVersion: 1, Node: "node1", Generated: time.Now(), LogSource: api.LogMemory}
	files := []reportFile{{api.ReportStatus, []byte(`{"a":1}`)}, {api.ReportLog, log.Bytes()}}
	const max = 64 << 10
	data, err := packPart(files, part, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > max {
		t.Fatalf("part of %d bytes, bound %d", len(data), max)
	}
	got, p, err := unpackPart(data)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, f := range got {
		byName[f.name] = string(f.data)
	}
	if byName[api.ReportStatus] != `{"a":1}` {
		t.Errorf("status: %q", byName[api.ReportStatus])
	}
	l := byName[api.ReportLog]
	if !strings.HasSuffix(l, newest) || len(l) < max/2 || !strings.HasPrefix(l, "line ") {
		t.Errorf("log of %d bytes: want the newest lines, whole, about the bound", len(l))
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "fenced.log: cut to its newest") || p.Node != "node1" || p.LogSource != api.LogMemory {
		t.Errorf("part.json: %+v", p)
	}
	t.Logf("1 MiB of log cut to %d bytes, part %d bytes", len(l), len(data))

	// No log to cut: the largest file goes, said so.
	big := make([]byte, 200<<10)
	rand.Read(big)
	data, err = packPart([]reportFile{{api.ReportStatus, []byte("{}")}, {api.ReportHistory, big}}, part, max)
	if err != nil {
		t.Fatal(err)
	}
	got, p, _ = unpackPart(data)
	if len(got) != 2 || got[1].name != api.ReportStatus || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "history.json (204800 bytes) left out") {
		t.Errorf("files %v, notes %q", got, p.Notes)
	}
}

// A part from another node is refused unless it is plain files of plain
// names, bounded, with its part.json.
func TestUnpackPartRefuses(t *testing.T) {
	mk := func(entries ...*tar.Header) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		tw := tar.NewWriter(zw)
		for _, h := range entries {
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(make([]byte, h.Size))
			}
		}
		tw.Close()
		zw.Close()
		return b.Bytes()
	}
	reg := func(name string, size int64) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644}
	}
	cases := map[string][]byte{
		"not gzip":      []byte("hello"),
		"a path":        mk(reg("../etc/passwd", 1)),
		"a directory":   mk(&tar.Header{Typeflag: tar.TypeDir, Name: "x/"}),
		"a symlink":     mk(&tar.Header{Typeflag: tar.TypeSymlink, Name: "status.json", Linkname: "/etc/shadow"}),
		"twice":         mk(reg("a", 1), reg("a", 1)),
		"no part.json":  mk(reg("status.json", 2)),
		"too large":     mk(reg("a", reportUnpackedMax/2+1), reg("b", reportUnpackedMax/2+1)),
		"bad part.json": mk(reg("part.json", 3)),
	}
	for name, data := range cases {
		if _, _, err := unpackPart(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The bundle: index.json and README.txt first, then a directory per node
// that answered; an unreachable node is named with its reason.
func TestWriteReport(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	parts := []nodePart{
		{name: "node1", files: []reportFile{{api.ReportPartFile, []byte("{}")}, {api.ReportStatus, []byte("{}")}}, part: api.ReportPart{LogSource: api.LogMemory, Notes: []string{"fenced.log: starts later"}}},
		{name: "node2", err: errors.New("forward to node2: no route\x1b[31m")},
	}
	ix := reportIndex("my cluster", "node1", at, at.Add(-2*time.Hour), parts)
	dir := reportDir(ix.Cluster, at)
	if dir != "fenced-report-my_cluster-20261203T100000Z" {
		t.Fatalf("dir %q", dir)
	}
	var b bytes.Buffer
	if err := writeReport(&b, dir, ix, parts); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	contents := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		data, _ := io.ReadAll(tr)
		contents[h.Name] = string(data)
	}
	want := []string{dir + "/", dir + "/index.json", dir + "/README.txt", dir + "/node1/", dir + "/node1/part.json", dir + "/node1/status.json"}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("entries %v\nwant %v", names, want)
	}
	var got api.ReportIndexDoc
	if err := json.Unmarshal([]byte(contents[dir+"/index.json"]), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Nodes) != 2 || got.Nodes[1].Unreachable != `forward to node2: no route[31m` || got.Nodes[0].Unreachable != "" ||
		fmt.Sprint(got.Nodes[0].Files) != "[part.json status.json]" || got.Nodes[0].LogSource != api.LogMemory {
		t.Errorf("index: %+v", got)
	}
	readme := contents[dir+"/README.txt"]
	for _, s := range []string{"cluster my cluster", "Unreachable nodes (1 of 2)", `node2: forward to node2: no route[31m`, "note node1: fenced.log: starts later", "fenced.log"} {
		if !strings.Contains(readme, s) {
			t.Errorf("README lacks %q:\n%s", s, readme)
		}
	}
}

func TestParseReportSince(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     now.Add(-2 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"2026-12-03T09:00:00Z": now.Add(-time.Hour),
		"2026-12-04T09:00:00Z": now, // the future: nothing of the log, the rest now
	} {
		if got, err := parseReportSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1h", "yesterday", "800h", "2026-01-01T00:00:00Z"} {
		if _, err := parseReportSince(in, now); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestUnitOf(t *testing.T) {
	for in, want := range map[string]string{
		"0::/system.slice/fenced.service\n":                       "fenced.service",
		"12:pids:/system.slice/fenced-a.service\n0::/x.service\n": "fenced-a.service",
		"0::/user.slice/user-0.slice/session-3.scope\n":           "fenced.service",
		"": "fenced.service",
	} {
		if got := unitOf(in); got != want {
			t.Errorf("unitOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// tailBuffer keeps the newest bytes, from a line's start.
func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 100}
	for i := range 100 {
		fmt.Fprintf(tb, "line %02d\n", i)
	}
	got := string(tb.Bytes())
	if !tb.cut || !strings.HasPrefix(got, "line ") || !strings.HasSuffix(got, "line 99\n") || len(got) > 100 {
		t.Errorf("%q cut %v", got, tb.cut)
	}
	small := &tailBuffer{max: 100}
	small.Write([]byte("a\nb\n"))
	if string(small.Bytes()) != "a\nb\n" || small.cut {
		t.Errorf("%q", small.Bytes())
	}
}

// Under a journal the log is journalctl's for the daemon's unit and the
// period; when journalctl fails or has nothing, the daemon's ring, said in
// a note.
func TestReportLogSource(t *testing.T) {
	bin := t.TempDir()
	argsFile := filepath.Join(bin, "args")
	script := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, "journalctl"), []byte("#!/bin/sh\necho \"$@\" > "+argsFile+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	ring := logring.New(0)
	slog.New(ring.Handler(nil)).Info("from the ring")
	d := &Daemon{opts: Options{LogRing: ring}}
	since := time.Unix(1796292000, 0)

	t.Setenv("JOURNAL_STREAM", "8:1234")
	script("echo '2026-12-03T10:00:00+0000 host fenced[1]: level=INFO msg=\"from the journal\"'\n")
	text, source, notes := d.reportLog(context.Background(), since)
	args, _ := os.ReadFile(argsFile)
	if source != api.LogJournal || !strings.Contains(string(text), "from the journal") || len(notes) != 0 ||
		!strings.HasPrefix(string(args), "--unit ") || !strings.Contains(string(args), " --since @1796292000 --output short-iso") {
		t.Errorf("journal: %s %q %q, args %q", source, text, notes, args)
	}

	script("echo 'Failed to open journal' >&2; exit 1\n")
	text, source, notes = d.reportLog(context.Background(), since)
	if source != api.LogMemory || !strings.Contains(string(text), "from the ring") || len(notes) != 1 || !strings.Contains(notes[0], "Failed to open journal") {
		t.Errorf("journalctl failing: %s %q %q", source, text, notes)
	}

	script("exit 0\n")
	if _, source, notes = d.reportLog(context.Background(), since); source != api.LogMemory || len(notes) != 1 || !strings.Contains(notes[0], "no line") {
		t.Errorf("empty journal: %s %q", source, notes)
	}

	t.Setenv("JOURNAL_STREAM", "")
	os.Remove(argsFile)
	if _, source, _ = d.reportLog(context.Background(), since); source != api.LogMemory {
		t.Errorf("no journal: %s", source)
	}
	if _, err := os.Stat(argsFile); err == nil {
		t.Error("journalctl run without a journal")
	}

	d.opts.LogRing = nil
	if text, source, notes = d.reportLog(context.Background(), since); source != api.LogNone || len(text) != 0 || len(notes) != 1 {
		t.Errorf("no ring: %s %q %q", source, text, notes)
	}
}

// A part at its bound, as incompressible as it can be, still fits the
// reply of a forwarded call (base64 in JSON, and the call's envelope).
func TestReportPartFitsGossip(t *testing.T) {
	part := make([]byte, reportPartMax)
	rand.Read(part)
	reply, err := json.Marshal(reportReply{Part: part})
	if err != nil {
		t.Fatal(err)
	}
	// The envelope: id, from, the reply flag, a node name.
	if env := 256; len(reply)+env > quorum.MaxMessage {
		t.Fatalf("a %d-byte part makes a %d-byte reply: over the gossip message limit %d", reportPartMax, len(reply)+env, quorum.MaxMessage)
	}
	t.Logf("reply of a full part: %d bytes of %d", len(reply), quorum.MaxMessage)
}
