package daemon_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// The monitoring files the packages install under /usr/share/fenced.
const (
	rulesFile     = "../etc/prometheus/fenced-rules.yml"
	rulesTestFile = "../etc/prometheus/fenced-rules.test.yml"
	dashboardFile = "../etc/grafana/fenced-dashboard.json"
)

// needTool fails (never skips) when a program the test drives is missing:
// CI installs it (.ci/install-deps).
func needTool(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (Debian's prometheus; .ci/install-deps installs it): %v", tool, err)
		}
	}
}

// TestAlertRules checks the alerting rules with Prometheus's own promtool:
// `check rules`, then `test rules` on fenced-rules.test.yml, which feeds
// each alert series that must fire it and series that must not. promtool
// compares every annotation, so the tests run on a copy of the rules
// without the descriptions (prose, whose templates `check rules` parses
// and TestPrometheusScrapesCluster renders).
func TestAlertRules(t *testing.T) {
	needTool(t, "promtool")
	if out, err := exec.Command("promtool", "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules ruleFile
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for i, r := range g.Rules {
			if r["alert"] == nil {
				continue
			}
			name, _ := r["alert"].(string)
			alerts = append(alerts, name)
			ann, _ := r["annotations"].(map[string]any)
			labels, _ := r["labels"].(map[string]any)
			if ann["summary"] == nil || ann["description"] == nil {
				t.Errorf("%s: wants a summary and a description", name)
			}
			if sev := labels["severity"]; sev != "critical" && sev != "warning" && sev != "info" {
				t.Errorf("%s: severity %v, want critical, warning or info", name, sev)
			}
			delete(ann, "description")
			g.Rules[i] = r
		}
	}
	// Every alert has a unit test.
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !strings.Contains(string(tests), "alertname: "+a+"\n") {
			t.Errorf("%s has no test in %s", a, rulesTestFile)
		}
	}
	dir := t.TempDir()
	out, err := yaml.Marshal(&rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fenced-rules.yml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fenced-rules.test.yml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("promtool", "test", "rules", "fenced-rules.test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%d alerts, each tested", len(alerts))
}

type ruleFile struct {
	Groups []struct {
		Name  string           `yaml:"name"`
		Rules []map[string]any `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Instant    bool           `json:"instant"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// builtinPanels are the panel types Grafana ships (no plugin to install).
var builtinPanels = []string{"row", "stat", "timeseries", "table", "state-timeline", "gauge", "bargauge", "text"}

// grafanaVars are Grafana's own variables a query may use.
var grafanaVars = []string{"__rate_interval", "__interval", "__range"}

func readDashboard(t *testing.T) (dashboard, []panel) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var all []panel
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return d, all
}

var varRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)

// TestDashboard checks the dashboard's shape: it imports anywhere (its
// data source is a variable, every panel and query uses it), needs no
// plugin, and every query names only variables it defines.
func TestDashboard(t *testing.T) {
	d, panels := readDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want all set", d.Title, d.UID, d.SchemaVersion)
	}
	vars := slices.Clone(grafanaVars)
	hasDS := false
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: data source %+v, want ${datasource}", v.Name, v.Datasource)
		}
	}
	if !hasDS {
		t.Fatal("no Prometheus data source variable named datasource")
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] {
			t.Errorf("%s: id used twice", where)
		}
		ids[p.ID] = true
		if !slices.Contains(builtinPanels, p.Type) {
			t.Errorf("%s: type %q is not a panel Grafana ships", where, p.Type)
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: gridPos %+v outside the 24 columns", where, p.GridPos)
		}
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if p.Title == "" || p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("%s: wants a title, data source ${datasource} and queries: %+v, %d queries", where, p.Datasource, len(p.Targets))
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			queries++
			if q.Expr == "" || q.RefID == "" || refs[q.RefID] || q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				t.Errorf("%s: query %q (refId %q, data source %+v): wants an expression, its own refId and ${datasource}", where, q.Expr, q.RefID, q.Datasource)
			}
			refs[q.RefID] = true
			for _, m := range varRef.FindAllStringSubmatch(q.Expr, -1) {
				if !slices.Contains(vars, m[1]) {
					t.Errorf("%s: query %q uses $%s, which the dashboard does not define", where, q.Expr, m[1])
				}
			}
		}
	}
	t.Logf("%d panels, %d queries", len(panels), queries)
}

// promAPI is a client of a Prometheus server's HTTP API.
type promAPI struct{ base string }

func (p promAPI) get(path string, q url.Values, out any) error {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// series asks an instant (or, with a range, a range) query and returns
// the series it gave.
func (p promAPI) series(expr string, from, to time.Time) (int, error) {
	var res struct {
		Result []json.RawMessage `json:"result"`
	}
	if from.IsZero() {
		err := p.get("/api/v1/query", url.Values{"query": {expr}}, &res)
		return len(res.Result), err
	}
	err := p.get("/api/v1/query_range", url.Values{"query": {expr}, "start": {promTime(from)}, "end": {promTime(to)}, "step": {"1"}}, &res)
	return len(res.Result), err
}

func promTime(t time.Time) string { return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64) }

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

func (p promAPI) alerts() ([]promAlert, error) {
	var res struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", nil, &res)
	return res.Alerts, err
}

type promRule struct {
	Name      string `json:"name"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	Type      string `json:"type"`
}

func (p promAPI) rules() ([]promRule, error) {
	var res struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	err := p.get("/api/v1/rules", nil, &res)
	var out []promRule
	for _, g := range res.Groups {
		out = append(out, g.Rules...)
	}
	return out, err
}

// startPrometheus runs a real Prometheus that scrapes targets every second
// as job "fenced" and evaluates the rules file every second; it is killed
// at cleanup (its log shown if the test failed).
func startPrometheus(t *testing.T, targets []string) promAPI {
	t.Helper()
	needTool(t, "prometheus")
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	port, err := devcluster.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files": []string{rules},
		"scrape_configs": []any{map[string]any{"job_name": "fenced",
			"static_configs": []any{map[string]any{"targets": targets}}}},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "prometheus.log")
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("prometheus", "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("---- prometheus log (last 3000 bytes) ----\n%s", tail(string(b), 3000))
		}
	})
	api := promAPI{base: "http://" + listen}
	waitUntil(t, "prometheus ready", 30*time.Second, func() bool {
		resp, err := http.Get(api.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return api
}

// TestPrometheusScrapesCluster runs the shipped rules and dashboard
// against real software: a 3-node cluster of fenced processes (simulated
// BMCs, a Dummy resource, Pacemaker's alert_file agent) scraped by a real
// Prometheus that loads the rules. The rules load and evaluate without
// error; a healthy cluster raises no alert; every metric the rules and the
// dashboard name is exported. The primary is killed (its successor fences
// it and takes over) and another node's BMC password changes: the matching
// alerts become pending or firing, with their annotations rendered, and
// none of the others; then every query of every dashboard panel, with the
// dashboard's variables substituted, returns data.
func TestPrometheusScrapesCluster(t *testing.T) {
	needTool(t, "prometheus")
	needOCF(t, "Dummy")
	if _, err := os.Stat(alertFileSample); err != nil {
		t.Fatalf("Pacemaker's sample alert agents are missing (Debian's pacemaker-common): %v", err)
	}
	begin := time.Now()
	dir := t.TempDir()
	metrics := metricAddrs(t, 3)
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true,
		Configure: func(cfg *config.Config) {
			for name, d := range cfg.Devices {
				d.MonitorInterval = config.Duration(monitorEvery)
				d.Timeout = config.Duration(2 * time.Second)
				cfg.Devices[name] = d
			}
			cfg.Resources = []config.Resource{{Name: "dummy", OCF: "heartbeat:Dummy", MonitorInterval: ms(500)}}
		},
		NodeConfig: func(i int, cfg *config.Config) {
			cfg.Metrics.Listen = metrics[i]
			cfg.Alerts = []config.Alert{{Name: "file", Path: alertFileSample,
				Recipients: []config.AlertRecipient{{Value: filepath.Join(dir, cfg.Node+".alerts")}}}}
			rs := slices.Clone(cfg.Resources)
			rs[0].NodeParams = map[string]string{"state": filepath.Join(dir, cfg.Node+".dummy.state")}
			cfg.Resources = rs
		}})
	prom := startPrometheus(t, metrics)
	started := time.Now()

	p, e1, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctxT(t, 15*time.Second), p); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "three targets up", 15*time.Second, func() bool {
		n, err := prom.series(`up{job="fenced"} == 1`, time.Time{}, time.Time{})
		return err == nil && n == 3
	})
	scraped := time.Now()
	// The rules loaded, and each evaluated without error.
	want := 0
	if b, err := os.ReadFile(rulesFile); err == nil {
		want = strings.Count(string(b), "\n      - alert: ")
	}
	var rules []promRule
	waitUntil(t, "every rule evaluated", 15*time.Second, func() bool {
		rules, err = prom.rules()
		ok := err == nil && len(rules) == want && want > 0
		for _, r := range rules {
			ok = ok && r.Health == "ok"
		}
		return ok
	})
	// A healthy cluster raises nothing (a primary not yet mounted when
	// Prometheus began may leave FencedNoPrimary pending a moment).
	var active []promAlert
	waitUntil(t, "no alert on a healthy cluster", 15*time.Second, func() bool {
		active, err = prom.alerts()
		return err == nil && len(active) == 0
	})
	t.Logf("%d rules loaded and evaluated, none active on the healthy cluster, %v after Prometheus started", len(rules), time.Since(started).Round(100*time.Millisecond))

	// The primary dies: its successor fences it through its BMC and takes
	// over; then the BMC of the node left as secondary refuses its
	// password.
	p.Kill()
	q, e2, err := c.Primary(ctxT(t, 30*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Fatalf("epoch %d after %d", e2, e1)
	}
	r := c.Other(p, q)
	if err := c.BMCs[r.Index].SetPassword("changed-by-policy"); err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctxT(t, 15*time.Second), q); err != nil {
		t.Fatal(err)
	}
	type expect struct {
		alert, label, value string
		firing              bool // else pending or firing
	}
	expected := []expect{
		{"FencedNodeFenced", "target", p.Name, true},
		{"FencedNodeDown", "node", p.Name, false},
		{"FencedDaemonUnreachable", "instance", metrics[p.Index], false},
		{"FencedQuorumAtRisk", "job", "fenced", false},
		{"FencedDeviceUnhealthy", "device", r.Name + "-bmc", false},
		{"FencedNoFencePath", "node", r.Name, false},
	}
	killed := time.Now()
	seen := map[string]time.Duration{}
	waitUntil(t, "the alerts of a fenced primary and a failing BMC", 30*time.Second, func() bool {
		if active, err = prom.alerts(); err != nil {
			return false
		}
		all := true
		for _, e := range expected {
			found := false
			for _, a := range active {
				found = found || a.Labels["alertname"] == e.alert && a.Labels[e.label] == e.value && (a.State == "firing" || !e.firing)
			}
			if found {
				if _, ok := seen[e.alert]; !ok {
					seen[e.alert] = time.Since(killed)
				}
			}
			all = all && found
		}
		return all
	})
	expectedNames := map[string]bool{}
	for _, e := range expected {
		expectedNames[e.alert] = true
	}
	// No other alert, once what passes with the takeover has (a holder
	// not yet mounted, a scrape that timed out on a loaded machine).
	unexpected := func() []promAlert {
		var out []promAlert
		for _, a := range active {
			if !expectedNames[a.Labels["alertname"]] {
				out = append(out, a)
			}
		}
		return out
	}
	for deadline := time.Now().Add(10 * time.Second); len(unexpected()) > 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if active, err = prom.alerts(); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range unexpected() {
		t.Errorf("unexpected alert %s (%s): %v", a.Labels["alertname"], a.State, a.Labels)
	}
	for _, a := range active {
		name := a.Labels["alertname"]
		for k, v := range a.Annotations {
			if v == "" || strings.Contains(v, "<no value>") || strings.Contains(v, "{{") || strings.Contains(v, "<error expanding template") {
				t.Errorf("%s: annotation %s not rendered: %q", name, k, v)
			}
		}
	}
	var lines []string
	for _, a := range active {
		lines = append(lines, fmt.Sprintf("%s %s: %s", a.Labels["alertname"], a.State, a.Annotations["summary"]))
	}
	sort.Strings(lines)
	t.Logf("after killing %s (epoch %d -> %d, %s primary) and %s's BMC password change, active alerts (first seen %v after the kill):\n  %s",
		p.Name, e1, e2, q.Name, r.Name, seen, strings.Join(lines, "\n  "))

	// Every metric the rules and the dashboard name is exported.
	var names []string
	if err := prom.get("/api/v1/label/__name__/values", nil, &names); err != nil {
		t.Fatal(err)
	}
	rb, _ := os.ReadFile(rulesFile)
	db, _ := os.ReadFile(dashboardFile)
	for _, m := range slices.Compact(slices.Sorted(slices.Values(regexp.MustCompile(`\bfenced_[a-z_]+`).FindAllString(string(rb)+string(db), -1)))) {
		if !slices.Contains(names, m) {
			t.Errorf("%s is named by the rules or the dashboard but not exported", m)
		}
	}

	// Every query of every panel returns data, as Grafana would ask it
	// (the variables substituted; a range query over the test, or an
	// instant one).
	d, panels := readDashboard(t)
	if len(d.Panels) == 0 {
		t.Fatal("dashboard without panels")
	}
	// The dashboard's range: since every node was scraped.
	rng := strconv.Itoa(max(2, int(time.Since(scraped).Seconds())-1)) + "s"
	subst := strings.NewReplacer("${job}", "fenced", "$job", "fenced", "$__rate_interval", "5s", "$__interval", "1s", "$__range", rng)
	queries, withQueries := 0, 0
	for _, pn := range panels {
		if len(pn.Targets) > 0 {
			withQueries++
		}
		for _, q := range pn.Targets {
			queries++
			expr := subst.Replace(q.Expr)
			from, to := started, time.Now()
			if q.Instant {
				from, to = time.Time{}, time.Time{}
			}
			n, err := prom.series(expr, from, to)
			if err != nil || n == 0 {
				t.Errorf("panel %q query %s: %d series, %v\n  %s", pn.Title, q.RefID, n, err, expr)
			}
		}
	}
	t.Logf("%d queries of %d panels returned data; %v in all", queries, withQueries, time.Since(begin).Round(100*time.Millisecond))
}
