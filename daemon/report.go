package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
)

// The diagnostics bundle (fencectl report, GET /v1/report): the node asked
// collects every configured node's part through the cluster, each part
// built by the node itself (reportPart), and writes them as one tar.gz.

// fwdReport asks another node for its part of a bundle.
const fwdReport = "report"

// Bounds of a bundle.
const (
	// reportPartMax bounds one node's part, compressed: its reply must
	// fit a gossip message (4 MiB, and JSON carries it in base64), and a
	// bundle of many nodes stays small enough to mail. The log is cut
	// first (its oldest lines), then the largest files.
	reportPartMax = 2 << 20
	// reportUnpackedMax bounds what a part may unpack to: a peer holds
	// the cluster key, but a bad part must not fill the asking node's
	// memory.
	reportUnpackedMax = 64 << 20
	// reportJournalMax is the most of the journal read (its newest
	// bytes): text compresses well, and the part's bound cuts the rest.
	reportJournalMax = 16 << 20
	// reportNodeTimeout bounds the wait for one node's part; a node that
	// does not answer within it is listed as unreachable.
	reportNodeTimeout = 20 * time.Second
	// reportJournalTimeout bounds journalctl, within reportNodeTimeout.
	reportJournalTimeout = 10 * time.Second
	// reportSecretFileMax is the most read of a secret's file to scrub
	// its contents (a password or key file is a line).
	reportSecretFileMax = 64 << 10
)

// reportFile is one file of a node's part.
type reportFile struct {
	name string
	data []byte
}

// reportRequest is the body of fwdReport, reportReply its answer
// (forwarded bodies are JSON: the part goes in base64).
type reportRequest struct {
	Since time.Time `json:"since"`
}

type reportReply struct {
	Part []byte `json:"part"`
}

// answerReport builds this node's part for another node's bundle.
func (d *Daemon) answerReport(ctx context.Context, from string, body []byte) ([]byte, error) {
	var req reportRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("report request from %s: %w", from, err)
	}
	part, err := d.reportPart(ctx, req.Since)
	if err != nil {
		return nil, err
	}
	return json.Marshal(reportReply{Part: part})
}

// reportPart builds this node's part of a bundle: its files, scrubbed of
// every secret the configuration holds, as a tar.gz within reportPartMax.
func (d *Daemon) reportPart(ctx context.Context, since time.Time) ([]byte, error) {
	// One part at a time: each holds a few MiB and a gzip's worth of
	// CPU, and this machine's work is fencing.
	d.reportMu.Lock()
	defer d.reportMu.Unlock()
	// The file is read once: what is redacted and scrubbed is what is
	// shown, even if it is being edited.
	file, fileErr := os.ReadFile(d.cfg.File())
	files, part := d.reportFiles(ctx, since, file, fileErr)
	secrets := reportSecrets(os.ReadFile, d.reportConfigs(file)...)
	for i := range files {
		files[i].data = scrubSecrets(files[i].data, secrets)
	}
	for i := range part.Notes {
		part.Notes[i] = string(scrubSecrets([]byte(part.Notes[i]), secrets))
	}
	return packPart(files, part, reportPartMax)
}

// reportConfigs are the configurations whose secrets are scrubbed from a
// part: the one the daemon started with, the running one (a reload may
// have brought new secrets), and the file as it is now (file: edited,
// maybe not reloaded yet).
func (d *Daemon) reportConfigs(file []byte) []*config.Config {
	cfgs := []*config.Config{d.cfg, d.config()}
	if c, err := config.Parse(file, d.cfg.File()); err == nil {
		cfgs = append(cfgs, c)
	}
	return cfgs
}

// reportFiles gathers this node's views for a bundle. What cannot be had
// is left out, with a note saying why.
func (d *Daemon) reportFiles(ctx context.Context, since time.Time, file []byte, fileErr error) ([]reportFile, api.ReportPart) {
	part := api.ReportPart{SchemaVersion: SchemaVersion, Node: d.self, Generated: time.Now().UTC(), Since: since.UTC()}
	var files []reportFile
	addJSON := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			part.Notes = append(part.Notes, fmt.Sprintf("%s left out: %v", name, err))
			return
		}
		files = append(files, reportFile{name, append(b, '\n')})
	}

	// The configuration: the file the daemon was started with, every
	// secret parameter redacted. A file that is not YAML any more is
	// left out: its secrets could not be found in it.
	path := d.cfg.File()
	if fileErr != nil {
		part.Notes = append(part.Notes, fmt.Sprintf("%s left out: %v", api.ReportConfig, fileErr))
	} else if red, err := config.RedactYAML(file); err != nil {
		part.Notes = append(part.Notes, fmt.Sprintf("%s left out: %s does not parse now, so its secrets cannot be redacted: %v", api.ReportConfig, path, err))
	} else {
		files = append(files, reportFile{api.ReportConfig, append([]byte("# "+path+", secrets redacted\n"), red...)})
	}

	addJSON(api.ReportStatus, d.StatusNow())
	h := History{SchemaVersion: SchemaVersion, Records: []api.Record{}}
	h.Records = append(h.Records, d.raft.FSM().State().History...)
	addJSON(api.ReportHistory, h)

	rv := raftView{SchemaVersion: SchemaVersion, Node: d.self, Leader: d.raft.Leader(), State: d.raft.RaftState(), Term: d.raft.Term(), Stats: d.raft.Stats()}
	if s, err := d.raft.Servers(); err != nil {
		rv.ServersError = err.Error()
	} else {
		rv.Servers = s
	}
	addJSON(api.ReportRaft, rv)

	gv := gossipView{SchemaVersion: SchemaVersion, Node: d.self, Members: []gossipMember{}}
	for _, m := range d.members.Members() {
		gm := gossipMember{Name: m.Name, Address: m.Addr, State: m.State, RTTMillis: float64(m.RTT.Microseconds()) / 1000,
			Role: m.Meta.Role, Epoch: m.Meta.Epoch, Storage: m.Meta.Storage, Version: m.Meta.Version, Raft: m.Meta.Raft,
			Config: m.Meta.Config, Ineligible: m.Meta.Ineligible, Resources: m.Meta.Resources}
		if !m.Contact.IsZero() {
			c := m.Contact.UTC()
			gm.LastContact = &c
		}
		gv.Members = append(gv.Members, gm)
	}
	addJSON(api.ReportGossip, gv)

	// Device health as this node's checks left it: no device is asked
	// anything for a report.
	addJSON(api.ReportDevices, api.DeviceList{SchemaVersion: SchemaVersion, Devices: d.devices()})
	addJSON(api.ReportVersion, buildView(d.self))

	logText, source, notes := d.reportLog(ctx, since)
	part.LogSource = source
	part.Notes = append(part.Notes, notes...)
	files = append(files, reportFile{api.ReportLog, logText})
	return files, part
}

// raftView is a part's raft.json.
type raftView struct {
	SchemaVersion int               `json:"schemaVersion"`
	Node          string            `json:"node"`
	Leader        string            `json:"leader"`
	State         string            `json:"state"`
	Term          uint64            `json:"term"`
	Servers       any               `json:"servers,omitempty"`
	ServersError  string            `json:"serversError,omitempty"`
	Stats         map[string]string `json:"stats"`
}

// gossipView is a part's gossip.json: every configured node as this
// node's gossip sees it, with what it advertises.
type gossipView struct {
	SchemaVersion int            `json:"schemaVersion"`
	Node          string         `json:"node"`
	Members       []gossipMember `json:"members"`
}

type gossipMember struct {
	Name        string     `json:"name"`
	Address     string     `json:"address"`
	State       string     `json:"state"`
	RTTMillis   float64    `json:"rttMillis"`
	LastContact *time.Time `json:"lastContact,omitempty"`
	Role        string     `json:"role,omitempty"`
	Epoch       uint64     `json:"epoch"`
	Storage     string     `json:"storage,omitempty"`
	Version     string     `json:"version,omitempty"`
	Raft        string     `json:"raft,omitempty"`
	Config      string     `json:"config,omitempty"`
	Ineligible  bool       `json:"ineligible,omitempty"`
	Resources   string     `json:"resources,omitempty"`
}

// buildInfoView is a part's version.json.
type buildInfoView struct {
	SchemaVersion int               `json:"schemaVersion"`
	Node          string            `json:"node"`
	Version       string            `json:"version"`
	Go            string            `json:"go"`
	Platform      string            `json:"platform"`
	Pid           int               `json:"pid"`
	Path          string            `json:"path,omitempty"`
	Module        string            `json:"module,omitempty"`
	Settings      map[string]string `json:"settings,omitempty"` // vcs.revision, -tags, CGO_ENABLED, ...
	Deps          []string          `json:"deps,omitempty"`     // module@version
}

func buildView(node string) buildInfoView {
	v := buildInfoView{SchemaVersion: SchemaVersion, Node: node, Version: api.Version, Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Pid: os.Getpid()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Path, v.Module = bi.Path, bi.Main.Path+"@"+bi.Main.Version
		v.Settings = map[string]string{}
		for _, s := range bi.Settings {
			v.Settings[s.Key] = s.Value
		}
		for _, m := range bi.Deps {
			v.Deps = append(v.Deps, m.Path+"@"+m.Version)
		}
	}
	return v
}

// reportLog is the daemon's log since since: the journal of its unit when
// it runs under systemd's journal, else its ring of recent lines.
func (d *Daemon) reportLog(ctx context.Context, since time.Time) (text []byte, source string, notes []string) {
	if os.Getenv("JOURNAL_STREAM") != "" {
		if bin, err := exec.LookPath("journalctl"); err != nil {
			notes = append(notes, "log: the daemon's stderr goes to the journal, but journalctl is not installed here: the lines the daemon keeps in memory instead")
		} else {
			cg, _ := os.ReadFile("/proc/self/cgroup")
			unit := unitOf(string(cg))
			text, cut, err := journal(ctx, bin, unit, since)
			switch {
			case err != nil:
				notes = append(notes, fmt.Sprintf("log: journalctl -u %s: %v: the lines the daemon keeps in memory instead", unit, err))
			case len(text) == 0:
				notes = append(notes, fmt.Sprintf("log: the journal has no line of unit %s for the period: the lines the daemon keeps in memory instead", unit))
			default:
				if cut {
					notes = append(notes, fmt.Sprintf("%s: the journal's newest %d MiB of the period only", api.ReportLog, reportJournalMax>>20))
				}
				return text, api.LogJournal, notes
			}
		}
	}
	ring := d.opts.LogRing
	if ring == nil {
		return nil, api.LogNone, append(notes, "log: this daemon keeps no log lines in memory (started without one) and has no journal")
	}
	text, cut := ring.Since(since)
	if cut {
		notes = append(notes, fmt.Sprintf("%s: starts later than the period: the daemon keeps only its newest %d KiB of lines in memory", api.ReportLog, ring.Size()>>10))
	}
	return text, api.LogMemory, notes
}

// unitOf is the systemd unit of the process whose /proc/self/cgroup is
// cgroup ("0::/system.slice/fenced.service"), else fenced.service.
func unitOf(cgroup string) string {
	for _, line := range strings.Split(cgroup, "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if u := path.Base(parts[2]); strings.HasSuffix(u, ".service") {
			return u
		}
	}
	return "fenced.service"
}

// journal runs journalctl for unit since since, and returns its newest
// reportJournalMax bytes (cut: there were more).
func journal(ctx context.Context, bin, unit string, since time.Time) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, reportJournalTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--unit", unit, "--since", "@"+strconv.FormatInt(since.Unix(), 10),
		"--output", "short-iso", "--no-pager", "--quiet")
	out := &tailBuffer{max: reportJournalMax}
	var stderr tailBuffer
	stderr.max = 4 << 10
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(string(stderr.Bytes())); msg != "" {
			err = fmt.Errorf("%w: %s", err, api.CleanText(msg))
		}
		return nil, false, err
	}
	return out.Bytes(), out.cut, nil
}

// tailBuffer keeps the newest max bytes written to it, from the start of
// a line when older ones were dropped.
type tailBuffer struct {
	max int
	b   []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

// Bytes is what was kept.
func (t *tailBuffer) Bytes() []byte {
	b := t.b
	if len(b) > t.max {
		b, t.cut = b[len(b)-t.max:], true
	}
	if t.cut {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return b
}

// reportSecrets are the texts a part must not hold: the secret values of
// every configuration given, the contents of their secrets' files (the
// gossip key's too: whole, and each line), what their _script forms print
// now (runScript) and printed before in this process (agents.ScriptSecrets:
// a rotated password may be in an older log line), and each of those as
// JSON and Go quoting write it (a status's error text, a log line's quoted
// field). Longest first, so a secret that holds another is scrubbed whole.
func reportSecrets(readFile func(string) ([]byte, error), cfgs ...*config.Config) []string {
	seen, ranScript := map[string]bool{}, map[string]bool{}
	var out []string
	add := func(s string) {
		s = strings.TrimSpace(s)
		if s == "" || seen[s] {
			return
		}
		seen[s] = true
		out = append(out, s)
		if b, err := json.Marshal(s); err == nil {
			if j := string(b[1 : len(b)-1]); !seen[j] {
				seen[j] = true
				out = append(out, j)
			}
		}
		if q := strconv.Quote(s); !seen[q[1:len(q)-1]] {
			seen[q[1:len(q)-1]] = true
			out = append(out, q[1:len(q)-1])
		}
	}
	for _, c := range cfgs {
		if c == nil {
			continue
		}
		values, files, scripts := c.Secrets()
		for _, v := range values {
			add(v)
		}
		for _, s := range scripts {
			if !ranScript[s] {
				ranScript[s] = true
				if v, err := runScript(s); err == nil {
					add(v)
				}
			}
		}
		for _, f := range files {
			data, err := readFile(f)
			if err != nil {
				continue // nothing there to leak
			}
			if len(data) > reportSecretFileMax {
				data = data[:reportSecretFileMax]
			}
			add(string(data))
			for _, line := range strings.Split(string(data), "\n") {
				add(line)
			}
		}
	}
	for _, v := range agents.ScriptSecrets() {
		add(v)
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// runScript runs a secret's _script form as an agent does and returns
// the first line it prints.
var runScript = func(script string) (string, error) {
	return agents.Params{"secret_script": script}.Secret(context.Background(), "secret")
}

// scrubSecrets replaces every secret in data by config.Redacted.
func scrubSecrets(data []byte, secrets []string) []byte {
	for _, s := range secrets {
		if bytes.Contains(data, []byte(s)) {
			data = bytes.ReplaceAll(data, []byte(s), []byte(config.Redacted))
		}
	}
	return data
}

// packPart writes files and part.json as a tar.gz of at most max bytes.
// Over it, the log loses its oldest lines, then the largest other files
// are left out, each cut said in part.json.
func packPart(files []reportFile, part api.ReportPart, max int) ([]byte, error) {
	files = slices.Clone(files)
	base := slices.Clone(part.Notes)
	cuts := map[string]string{}
	var order []string
	cut := func(name, note string) {
		if _, ok := cuts[name]; !ok {
			order = append(order, name)
		}
		cuts[name] = note
	}
	for range 16 {
		part.Notes = slices.Clone(base)
		for _, n := range order {
			part.Notes = append(part.Notes, cuts[n])
		}
		data, err := tarGz(files, part)
		if err != nil {
			return nil, fmt.Errorf("report of %s: %w", part.Node, err)
		}
		if len(data) <= max {
			return data, nil
		}
		// Shrink what compresses worst in proportion, with a margin.
		ratio := float64(max) / float64(len(data)) * 0.85
		i := slices.IndexFunc(files, func(f reportFile) bool { return f.name == api.ReportLog })
		if i >= 0 && len(files[i].data) > 0 {
			f := &files[i]
			keep := int(float64(len(f.data)) * ratio)
			was := len(f.data)
			if k := len(f.data) - keep; k > 0 {
				if j := bytes.IndexByte(f.data[k:], '\n'); j >= 0 && j < keep {
					k += j + 1
				}
				f.data = f.data[k:]
			}
			if len(f.data) == was { // a single line: drop it
				f.data = nil
			}
			cut(api.ReportLog, fmt.Sprintf("%s: cut to its newest %d bytes to keep the part within %d KiB compressed", api.ReportLog, len(f.data), max>>10))
			continue
		}
		big := -1
		for j, f := range files {
			if f.name != api.ReportLog && (big < 0 || len(f.data) > len(files[big].data)) {
				big = j
			}
		}
		if big < 0 || len(files[big].data) == 0 {
			return nil, fmt.Errorf("report of %s: the part is over %d bytes with every file left out", part.Node, max)
		}
		cut(files[big].name, fmt.Sprintf("%s (%d bytes) left out: over the part's bound of %d KiB compressed", files[big].name, len(files[big].data), max>>10))
		files = slices.Delete(files, big, big+1)
	}
	return nil, fmt.Errorf("report of %s: could not bring the part within %d bytes", part.Node, max)
}

// tarGz writes part.json then files as a tar.gz.
func tarGz(files []reportFile, part api.ReportPart) ([]byte, error) {
	pj, err := json.MarshalIndent(part, "", "  ")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, f := range append([]reportFile{{api.ReportPartFile, append(pj, '\n')}}, files...) {
		if err := writeTarFile(tw, f.name, f.data, part.Generated); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeTarFile(tw *tar.Writer, name string, data []byte, at time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: at}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// unpackPart reads a part another node sent: plain files with plain
// names, within reportUnpackedMax in all, and its part.json.
func unpackPart(data []byte) ([]reportFile, api.ReportPart, error) {
	var part api.ReportPart
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, part, fmt.Errorf("not a gzip archive: %w", err)
	}
	tr := tar.NewReader(zr)
	var files []reportFile
	total := int64(0)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, part, fmt.Errorf("archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg || !plainName(h.Name) || names[h.Name] {
			return nil, part, fmt.Errorf("archive: entry %q: want a file of a plain name, once", api.CleanText(h.Name))
		}
		names[h.Name] = true
		if total += h.Size; h.Size < 0 || total > reportUnpackedMax {
			return nil, part, fmt.Errorf("archive: over %d MiB unpacked", reportUnpackedMax>>20)
		}
		b, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			return nil, part, fmt.Errorf("archive: %s: %w", h.Name, err)
		}
		if h.Name == api.ReportPartFile {
			if err := json.Unmarshal(b, &part); err != nil {
				return nil, part, fmt.Errorf("archive: %s: %w", h.Name, err)
			}
		}
		files = append(files, reportFile{h.Name, b})
	}
	if !names[api.ReportPartFile] {
		return nil, part, fmt.Errorf("archive: no %s", api.ReportPartFile)
	}
	return files, part, nil
}

// plainName: a file name of a part (no directory, nothing odd).
func plainName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// nodePart is one node's part of a bundle, or why it is missing.
type nodePart struct {
	name  string
	files []reportFile
	part  api.ReportPart
	err   error
}

// collectReport gathers every configured node's part, in parallel, this
// node's own built here.
func (d *Daemon) collectReport(ctx context.Context, since time.Time) []nodePart {
	nodes := d.cfg.Nodes
	out := make([]nodePart, len(nodes))
	body, _ := json.Marshal(reportRequest{Since: since})
	gossip := map[string]string{}
	for _, m := range d.members.Members() {
		g := m.State
		if !m.Contact.IsZero() {
			g += fmt.Sprintf(", last heard %v ago", time.Since(m.Contact).Round(100*time.Millisecond))
		}
		gossip[m.Name] = g
	}
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, reportNodeTimeout)
			defer cancel()
			np := nodePart{name: n.Name}
			var data []byte
			if n.Name == d.self {
				data, np.err = d.reportPart(ctx, since)
			} else {
				var out []byte
				if out, np.err = d.members.Call(ctx, n.Name, fwdReport, body); np.err == nil {
					var r reportReply
					if np.err = json.Unmarshal(out, &r); np.err != nil {
						np.err = fmt.Errorf("report of %s: undecodable answer: %w", n.Name, np.err)
					}
					data = r.Part
				}
			}
			if np.err == nil {
				np.files, np.part, np.err = unpackPart(data)
			}
			if np.err != nil && ctx.Err() != nil {
				np.err = fmt.Errorf("no answer within %v: %w", reportNodeTimeout, np.err)
			}
			if np.err != nil && n.Name != d.self {
				np.err = fmt.Errorf("%w (gossip: %s)", np.err, gossip[n.Name])
			}
			out[i] = np
		})
	}
	wg.Wait()
	return out
}

// reportIndex is a bundle's index.json.
func reportIndex(cluster, by string, at, since time.Time, parts []nodePart) api.ReportIndexDoc {
	ix := api.ReportIndexDoc{SchemaVersion: SchemaVersion, Cluster: cluster, CollectedBy: by, Generated: at.UTC(), Since: since.UTC(), Nodes: []api.ReportNode{}}
	for _, p := range parts {
		n := api.ReportNode{Name: p.name}
		if p.err != nil {
			n.Unreachable = api.CleanText(p.err.Error())
		} else {
			n.LogSource, n.Notes = p.part.LogSource, p.part.Notes
			for _, f := range p.files {
				n.Files = append(n.Files, f.name)
			}
		}
		ix.Nodes = append(ix.Nodes, n)
	}
	return ix
}

// reportDir is a bundle's top directory: fenced-report-CLUSTER-TIME.
func reportDir(cluster string, at time.Time) string {
	c := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, cluster)
	return "fenced-report-" + c + "-" + at.UTC().Format("20060102T150405Z")
}

// reportReadme is a bundle's README.txt.
func reportReadme(ix api.ReportIndexDoc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fenced diagnostics bundle of cluster %s\n", ix.Cluster)
	fmt.Fprintf(&b, "collected by %s at %s; logs since %s (UTC)\n\n", ix.CollectedBy, ix.Generated.Format(time.RFC3339), ix.Since.Format(time.RFC3339))
	b.WriteString(`Every secret of the configuration (passwords, communities, keys, the
contents of their files and of the gossip key file) is replaced by
` + config.Redacted + ` in every file, the logs included.

One directory per node, each made by that node itself:
  ` + api.ReportConfig + `   the node's configuration file, secrets redacted
  ` + api.ReportStatus + `   fencectl status as the node answered it (-o json)
  ` + api.ReportHistory + `  the fence history the node holds (replicated)
  ` + api.ReportRaft + `     raft: leader, term, the servers and raft's counters
  ` + api.ReportGossip + `   gossip: every node as this node sees it, with what it advertises
  ` + api.ReportDevices + `  each fence device's health as this node's checks left it
  ` + api.ReportVersion + `  fenced's version and build (Go, VCS revision, modules)
  ` + api.ReportLog + `    the daemon's log for the period (the journal, or the lines
               the daemon keeps in memory: see part.json)
  ` + api.ReportPartFile + `     how the part was made: the log's source, what was cut or missing
` + api.ReportIndex + ` (beside this file) lists every node, its files and notes, or
why it is missing.

`)
	var missing []api.ReportNode
	for _, n := range ix.Nodes {
		if n.Unreachable != "" {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		fmt.Fprintf(&b, "Every configured node (%d) answered.\n", len(ix.Nodes))
	} else {
		fmt.Fprintf(&b, "Unreachable nodes (%d of %d), no directory:\n", len(missing), len(ix.Nodes))
		for _, n := range missing {
			fmt.Fprintf(&b, "  %s: %s\n", n.Name, n.Unreachable)
		}
	}
	for _, n := range ix.Nodes {
		for _, note := range n.Notes {
			fmt.Fprintf(&b, "note %s: %s\n", n.Name, note)
		}
	}
	return b.String()
}

// writeReport writes the bundle as a tar.gz: index.json and README.txt
// first (a reader of the stream learns what is in it before the parts),
// then each node's directory.
func writeReport(w io.Writer, dir string, ix api.ReportIndexDoc, parts []nodePart) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	at := ix.Generated
	ixj, _ := json.MarshalIndent(ix, "", "  ")
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: at}); err != nil {
		return err
	}
	if err := writeTarFile(tw, dir+"/"+api.ReportIndex, append(ixj, '\n'), at); err != nil {
		return err
	}
	if err := writeTarFile(tw, dir+"/"+api.ReportReadme, []byte(reportReadme(ix)), at); err != nil {
		return err
	}
	for _, p := range parts {
		if p.err != nil {
			continue
		}
		nd := dir + "/" + p.name
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: nd + "/", Mode: 0o755, ModTime: at}); err != nil {
			return err
		}
		for _, f := range p.files {
			if err := writeTarFile(tw, nd+"/"+f.name, f.data, at); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// parseReportSince reads the since parameter: an RFC 3339 time or a
// duration back from now (Go's units), at most ReportMaxSince back.
func parseReportSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now.Add(-api.ReportDefaultSince), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		dur, derr := time.ParseDuration(s)
		if derr != nil || dur < 0 {
			return time.Time{}, fmt.Errorf("since %q: want an RFC 3339 time or a positive duration back from now (2h)", s)
		}
		t = now.Add(-dur)
	}
	if now.Sub(t) > api.ReportMaxSince {
		return time.Time{}, fmt.Errorf("since %q: at most %v back", s, api.ReportMaxSince)
	}
	if t.After(now) {
		t = now
	}
	return t, nil
}

// reportRoutes serves GET /v1/report: the bundle, as a tar.gz stream.
func (d *Daemon) reportRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/report", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		since, err := parseReportSince(r.URL.Query().Get("since"), now)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, err)
			return
		}
		parts := d.collectReport(r.Context(), since)
		ix := reportIndex(d.cfg.Cluster.Name, d.self, now, since, parts)
		// Each part was scrubbed by its node; why a node is missing is
		// this node's text, scrubbed here.
		file, _ := os.ReadFile(d.cfg.File())
		secrets := reportSecrets(os.ReadFile, d.reportConfigs(file)...)
		for i := range ix.Nodes {
			ix.Nodes[i].Unreachable = string(scrubSecrets([]byte(ix.Nodes[i].Unreachable), secrets))
		}
		dir := reportDir(d.cfg.Cluster.Name, now)
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(apiWriteTimeout))
		w.Header().Set("Content-Type", "application/gzip")
		w.Header().Set("Content-Disposition", `attachment; filename="`+dir+`.tar.gz"`)
		w.WriteHeader(http.StatusOK)
		if err := writeReport(w, dir, ix, parts); err != nil {
			d.log.Warn("report: writing the bundle to the client", "err", err)
			return
		}
		var missing []string
		for _, n := range ix.Nodes {
			if n.Unreachable != "" {
				missing = append(missing, n.Name)
			}
		}
		d.log.Info("report: bundle written", "by", peerUser(r.Context()), "since", since.UTC().Format(time.RFC3339), "unreachable", strings.Join(missing, ","))
	})
}
