package daemon_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// spareSecret is the inline password of a second fence level of the
// stopped node; an admin also quotes it in a fence's reason, so it is in
// the history and in the logs the bundle holds, and must be scrubbed.
const spareSecret = "spare-Secr3t-9f2c"

// TestReportBundle (issue 26 §4): `fencectl report` on a 3-node cluster,
// one node stopped, writes one archive: every node that answered with each
// of its parts, the stopped one listed unreachable with the reason, and no
// secret of the configuration anywhere in it.
func TestReportBundle(t *testing.T) {
	dir := t.TempDir()
	fencectl := filepath.Join(dir, "fencectl")
	if out, err := exec.Command("go", "build", "-o", fencectl, "../cmd/fencectl").CombinedOutput(); err != nil {
		t.Fatalf("building fencectl: %v\n%s", err, out)
	}
	spare, err := devcluster.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Dir: t.TempDir(),
		// The log comes from the daemon's ring, even if the test runs
		// under a journal.
		Wrap: func(_ int, argv []string) []string { return append([]string{"env", "-u", "JOURNAL_STREAM"}, argv...) },
		Configure: func(cfg *config.Config) {
			// node1's BMC password inline, the others' in a file.
			d := cfg.Devices["node1-bmc"]
			delete(d.Params, "password_file")
			d.Params["password"] = devcluster.BMCPassword
			// node3's second level: nothing answers there.
			cfg.Devices["node3-spare"] = config.Device{Agent: "ipmi", Params: map[string]string{
				"ip": "127.0.0.1", "ipport": strconv.Itoa(spare), "username": "admin", "password": spareSecret, "lanplus": "1",
				"login_timeout": "1", "command_timeout": "1"}}
			cfg.Nodes[2].Fence = append(cfg.Nodes[2].Fence, config.Level{Devices: []config.DeviceRef{{Device: "node3-spare"}}})
		}})
	p, _, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var stopped, asked *devcluster.Node
	for _, n := range c.Nodes {
		switch {
		case n != p && stopped == nil:
			stopped = n
		case n != p && asked == nil:
			asked = n
		}
	}
	if asked == nil {
		asked = p
	}
	if err := stopped.Signal(syscall.SIGTERM); err != nil || !stopped.Wait(15*time.Second) {
		t.Fatalf("stopping %s: %v", stopped.Name, err)
	}
	// The reason quotes two secrets: the spare device's password and
	// the gossip key (the contents of key_file).
	key, err := os.ReadFile(c.Config.Gossip.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cl := asked.Client()
	defer cl.Close()
	var rec fencing.Record
	reason := "left the cluster; its spare BMC password is " + spareSecret + ", key " + strings.TrimSpace(string(key))
	if err := cl.Do(ctxT(t, 20*time.Second), "POST", "/v1/fence", nil, api.AdminRequest{Node: stopped.Name, Reason: reason}, &rec); err != nil {
		t.Fatalf("fence %s: %v", stopped.Name, err)
	}

	start := time.Now()
	bundle := filepath.Join(dir, "bundle.tar.gz")
	cmd := exec.Command(fencectl, "-s", asked.Socket, "report", "--since", "10m", "-o", bundle)
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("fencectl report: %v\n%s", err, out)
	}
	t.Logf("fencectl report from %s in %v:\n%s", asked.Name, took.Round(time.Millisecond), out)
	if fi, err := os.Stat(bundle); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bundle: %v %v", fi, err)
	}
	if !strings.Contains(string(out), stopped.Name+" ") || !strings.Contains(string(out), "unreachable: ") ||
		!strings.Contains(string(out), "wrote "+bundle) || !strings.Contains(string(out), "2 of 3 nodes") {
		t.Errorf("fencectl's summary does not name the unreachable node and the file:\n%s", out)
	}

	// To stdout: the same archive, the summary on stderr.
	cmd = exec.Command(fencectl, "-s", asked.Socket, "report", "-o", "-")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("fencectl report -o -: %v\n%s", err, stderr.String())
	}
	if zr, err := gzip.NewReader(strings.NewReader(stdout.String())); err != nil || !strings.Contains(stderr.String(), "wrote stdout") {
		t.Errorf("report -o -: stdout not a gzip archive (%v) or no summary on stderr: %q", err, stderr.String())
	} else if _, err := io.Copy(io.Discard, zr); err != nil {
		t.Errorf("report -o -: %v", err)
	}
	// A period the daemon cannot read is refused before anything is sent.
	if _, err := cl.Get(ctxT(t, 10*time.Second), "/v1/report", url.Values{"since": {"yesterday"}}); err == nil || !strings.Contains(err.Error(), `since "yesterday"`) {
		t.Errorf("since=yesterday: %v", err)
	}

	files := untar(t, bundle)
	var top string
	for name := range files {
		top, _, _ = strings.Cut(name, "/")
		break
	}
	if !strings.HasPrefix(top, "fenced-report-dev-") {
		t.Fatalf("top directory %q", top)
	}
	t.Logf("%d files, top %s", len(files), top)

	// Not one secret anywhere: the BMC password (inline in node1's file,
	// in a file for the others), the spare device's, the gossip key.
	secrets := []string{devcluster.BMCPassword, spareSecret, strings.TrimSpace(string(key))}
	for name, data := range files {
		for _, s := range secrets {
			if strings.Contains(data, s) {
				t.Errorf("SECRET LEAK: %s holds %q", name, s)
			}
		}
	}

	// The JSON documents are those docs/schema publishes.
	checkDocSchema(t, "report-index.json", top+"/index.json", files)
	for name := range files {
		if doc, ok := map[string]string{"part.json": "report-part.json", "status.json": "status.json", "history.json": "history.json", "devices.json": "devices.json"}[filepath.Base(name)]; ok {
			checkDocSchema(t, doc, name, files)
		}
	}
	var ix api.ReportIndexDoc
	mustJSON(t, files, top+"/index.json", &ix)
	if ix.Cluster != "dev" || ix.CollectedBy != asked.Name || len(ix.Nodes) != 3 {
		t.Errorf("index: %+v", ix)
	}
	readme := files[top+"/README.txt"]
	for _, n := range ix.Nodes {
		if n.Name == stopped.Name {
			if !strings.Contains(n.Unreachable, "(gossip: ") || strings.Contains(n.Unreachable, "gossip: alive") || len(n.Files) > 0 {
				t.Errorf("index: stopped %s: %+v", n.Name, n)
			}
			if !strings.Contains(readme, n.Name+": "+n.Unreachable) {
				t.Errorf("README does not list %s as unreachable (%s):\n%s", n.Name, n.Unreachable, readme)
			}
			if _, ok := files[top+"/"+n.Name+"/status.json"]; ok {
				t.Errorf("a directory for the stopped %s", n.Name)
			}
			continue
		}
		if n.Unreachable != "" || n.LogSource != api.LogMemory {
			t.Errorf("index: %s: %+v", n.Name, n)
		}
		checkNodePart(t, files, top+"/"+n.Name+"/", n.Name, stopped.Name)
	}
	if took > 15*time.Second {
		t.Errorf("report took %v", took)
	}
}

// checkNodePart checks every file of one node's directory.
func checkNodePart(t *testing.T, files map[string]string, d, node, stopped string) {
	t.Helper()
	want := []string{"config.yaml", "status.json", "history.json", "raft.json", "gossip.json", "devices.json", "version.json", "fenced.log", "part.json"}
	for _, f := range want {
		if _, ok := files[d+f]; !ok {
			t.Errorf("%s: no %s", node, f)
		}
	}

	// The configuration: this node's file, every secret parameter
	// redacted (a _file form's path too), the key file's path kept.
	var cfg config.Config
	if err := yaml.Unmarshal([]byte(files[d+"config.yaml"]), &cfg); err != nil {
		t.Errorf("%s: config.yaml: %v", node, err)
	}
	if cfg.Node != node || cfg.Devices["node1-bmc"].Params["password"] != config.Redacted || cfg.Devices["node3-spare"].Params["password"] != config.Redacted ||
		cfg.Devices["node2-bmc"].Params["password_file"] != config.Redacted || cfg.Devices["node2-bmc"].Params["username"] != "admin" || !strings.HasSuffix(cfg.Gossip.KeyFile, "gossip.key") {
		t.Errorf("%s: config.yaml:\n%s", node, files[d+"config.yaml"])
	}

	var st api.Status
	mustJSON(t, files, d+"status.json", &st)
	if st.Node != node || st.Cluster != "dev" || len(st.Nodes) != 3 || !st.Quorum.Have {
		t.Errorf("%s: status.json: node %q cluster %q, %d nodes, quorum %v", node, st.Node, st.Cluster, len(st.Nodes), st.Quorum.Have)
	}

	// The fence of the stopped node, its reason scrubbed.
	var h api.History
	mustJSON(t, files, d+"history.json", &h)
	i := slices.IndexFunc(h.Records, func(r api.Record) bool { return r.Kind == fencing.KindFence && r.Target == stopped })
	if i < 0 {
		t.Errorf("%s: history.json has no fence of %s: %s", node, stopped, files[d+"history.json"])
	} else if got, want := h.Records[i].Reason, "left the cluster; its spare BMC password is <redacted>, key <redacted>"; got != want {
		t.Errorf("%s: history.json: the fence's reason %q, want %q", node, got, want)
	}

	var rv struct {
		Leader  string
		Term    uint64
		Servers []struct{ ID, Address, Suffrage string }
		Stats   map[string]string
	}
	mustJSON(t, files, d+"raft.json", &rv)
	if len(rv.Servers) != 3 || rv.Leader == "" || rv.Term == 0 || rv.Stats["term"] == "" || rv.Stats["last_log_index"] == "" {
		t.Errorf("%s: raft.json: %s", node, files[d+"raft.json"])
	}

	var gv struct {
		Node    string
		Members []struct{ Name, State string }
	}
	mustJSON(t, files, d+"gossip.json", &gv)
	states := map[string]string{}
	for _, m := range gv.Members {
		states[m.Name] = m.State
	}
	if gv.Node != node || len(states) != 3 || states[node] != "alive" || states[stopped] == "alive" {
		t.Errorf("%s: gossip.json: %s", node, files[d+"gossip.json"])
	}

	var dl api.DeviceList
	mustJSON(t, files, d+"devices.json", &dl)
	health := map[string]string{}
	for _, dv := range dl.Devices {
		health[dv.Name] = dv.Health.State
	}
	if len(health) != 4 || health["node3-spare"] == "" || health["node1-bmc"] == "" {
		t.Errorf("%s: devices.json: %v", node, health)
	}

	var vv struct {
		Node, Version, Go string
		Settings          map[string]string
	}
	mustJSON(t, files, d+"version.json", &vv)
	if vv.Node != node || vv.Version != api.Version || !strings.HasPrefix(vv.Go, "go") || vv.Settings["-tags"] != "faultinject" {
		t.Errorf("%s: version.json: %s", node, files[d+"version.json"])
	}

	// The log: the daemon's own lines of the period, from its start,
	// with their time.
	log := files[d+"fenced.log"]
	if !strings.Contains(log, `msg="fenced started" node=`+node) || !strings.HasPrefix(log, "time=") {
		t.Errorf("%s: fenced.log of %d lines:\n%s", node, strings.Count(log, "\n"), tail(log, 2000))
	}
	var part api.ReportPart
	mustJSON(t, files, d+"part.json", &part)
	if part.Node != node || part.LogSource != api.LogMemory {
		t.Errorf("%s: part.json: %+v", node, part)
	}
}

// checkDocSchema validates the bundle's file name against docs/schema/schema.
func checkDocSchema(t *testing.T, schema, name string, files map[string]string) {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("../docs/schema", schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(abs)
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(files[name]))
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if err := sch.Validate(v); err != nil {
		t.Errorf("%s does not match docs/schema/%s: %v", name, schema, err)
	}
}

func mustJSON(t *testing.T, files map[string]string, name string, v any) {
	t.Helper()
	data, ok := files[name]
	if !ok {
		t.Errorf("no %s", name)
		return
	}
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Errorf("%s: %v", name, err)
	}
}

// untar reads a tar.gz into a map of its regular files.
func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(b)
	}
	return files
}
