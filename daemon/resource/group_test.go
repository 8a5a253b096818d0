package resource

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
)

// The tests drive Debian's real resource-agents (make test installs them).
const dummy = "heartbeat:Dummy"

func needAgent(t testing.TB, agent string) {
	t.Helper()
	prov, typ, _ := strings.Cut(agent, ":")
	if _, err := os.Stat(agentPath(config.DefaultOCFRoot, prov, typ)); err != nil {
		t.Fatalf("%s not installed (apt-get install resource-agents; make test does): %v", agent, err)
	}
}

// recorder is a slog handler keeping the messages and their resource.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recAttrs{r: r, attrs: as}
}
func (r *recorder) WithGroup(string) slog.Handler { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	return (&recAttrs{r: r}).Handle(context.Background(), rec)
}

type recAttrs struct {
	r     *recorder
	attrs []slog.Attr
}

func (h *recAttrs) Enabled(context.Context, slog.Level) bool { return true }
func (h *recAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return &recAttrs{r: h.r, attrs: append(slices.Clone(h.attrs), as...)}
}
func (h *recAttrs) WithGroup(string) slog.Handler { return h }
func (h *recAttrs) Handle(_ context.Context, rec slog.Record) error {
	res := ""
	find := func(a slog.Attr) bool {
		if a.Key == "resource" {
			res = a.Value.String()
		}
		return true
	}
	for _, a := range h.attrs {
		find(a)
	}
	rec.Attrs(find)
	h.r.mu.Lock()
	h.r.msgs = append(h.r.msgs, rec.Message+" "+res)
	h.r.mu.Unlock()
	return nil
}

// events returns the recorded "MSG RESOURCE" lines starting with prefix.
func (r *recorder) events(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			out = append(out, strings.TrimSpace(strings.TrimPrefix(m, prefix)))
		}
	}
	return out
}

// dummyGroup configures n Dummy resources r1…rn whose state files live in
// dir (statePath(dir, "r1")).
func dummyGroup(t *testing.T, dir string, n int, edit func(rs []config.Resource)) *config.Config {
	t.Helper()
	needAgent(t, dummy)
	cfg := config.Default()
	cfg.Timing.Grace = config.Duration(10 * time.Second)
	for i := range n {
		name := "r" + string(rune('1'+i))
		cfg.Resources = append(cfg.Resources, config.Resource{Name: name, OCF: dummy,
			Params: map[string]string{"state": statePath(dir, name)}, MonitorInterval: config.Duration(100 * time.Millisecond)})
	}
	if edit != nil {
		edit(cfg.Resources)
	}
	return cfg
}

func statePath(dir, name string) string { return filepath.Join(dir, name+".state") }

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func newGroup(t *testing.T, cfg *config.Config) (*Group, *recorder) {
	t.Helper()
	rec := &recorder{}
	g, err := New(context.Background(), cfg, "node1", slog.New(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop(context.Background()) })
	return g, rec
}

func states(g *Group) []string {
	var out []string
	for _, s := range g.Status() {
		out = append(out, s.Name+"="+s.State)
	}
	return out
}

// TestDummyGroupOrder: three Dummy agents start in order and stop in
// reverse; each really ran (its state file appears and goes).
func TestDummyGroupOrder(t *testing.T) {
	dir := t.TempDir()
	g, rec := newGroup(t, dummyGroup(t, dir, 3, nil))
	// The probe at start finds nothing running; once started, that is no
	// longer what the status may say (issue 24).
	if err := g.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background(), 7, "node2"); err != nil {
		t.Fatal(err)
	}
	for _, s := range g.Status() {
		if s.LastResult != ResultNotMonitored && s.LastResult != "ok" || s.LastResult == ResultNotMonitored && !s.LastMonitor.IsZero() {
			t.Errorf("%s just started: last result %q at %v, want %q", s.Name, s.LastResult, s.LastMonitor, ResultNotMonitored)
		}
	}
	if got := rec.events("resource started"); !slices.Equal(got, []string{"r1", "r2", "r3"}) {
		t.Errorf("start order %v", got)
	}
	for _, r := range []string{"r1", "r2", "r3"} {
		if !exists(statePath(dir, r)) {
			t.Errorf("%s: Dummy state file missing after start", r)
		}
	}
	if got := states(g); !slices.Equal(got, []string{"r1=running", "r2=running", "r3=running"}) {
		t.Errorf("states %v", got)
	}
	time.Sleep(350 * time.Millisecond) // a few monitors
	if err := g.Monitor(context.Background()); err != nil {
		t.Fatalf("monitor of a healthy group: %v", err)
	}
	for _, s := range g.Status() {
		if s.LastMonitor.IsZero() || s.LastResult != "ok" || s.Kind != "ocf:heartbeat:Dummy" {
			t.Errorf("%s: status %+v", s.Name, s)
		}
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rec.events("resource stopped"); !slices.Equal(got, []string{"r3", "r2", "r1"}) {
		t.Errorf("stop order %v", got)
	}
	for _, r := range []string{"r1", "r2", "r3"} {
		if exists(statePath(dir, r)) {
			t.Errorf("%s: Dummy state file left after stop", r)
		}
	}
}

// TestDummyStartFailureInMiddle: r2's state file cannot be created, so its
// start fails (exit 1): r2 and r1 are stopped, r3 never starts, and the
// error names r2 and the OCF meaning.
func TestDummyStartFailureInMiddle(t *testing.T) {
	dir := t.TempDir()
	g, rec := newGroup(t, dummyGroup(t, dir, 3, func(rs []config.Resource) {
		rs[1].Params["state"] = filepath.Join(dir, "missing-dir", "r2.state")
	}))
	err := g.Start(context.Background(), 3, "")
	if err == nil {
		t.Fatal("start succeeded")
	}
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != OCFErrGeneric || !strings.Contains(err.Error(), "resource r2 (2 of 3)") {
		t.Fatalf("error %v", err)
	}
	if got := rec.events("resource started"); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("started %v", got)
	}
	if exists(statePath(dir, "r1")) || exists(statePath(dir, "r3")) {
		t.Error("r1 not stopped, or r3 started")
	}
	if got := states(g); !slices.Equal(got, []string{"r1=stopped", "r2=stopped", "r3=stopped"}) {
		t.Errorf("states %v", got)
	}
	if s := g.Status()[1]; s.Failures != 1 || !strings.Contains(s.LastError, "exit 1") {
		t.Errorf("r2 status %+v", s)
	}
	// Everything is stopped: the daemon's Stop after the failed start
	// has nothing left to do and succeeds.
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestDummyMonitorFailure: r2's state vanishes on the primary; its monitor
// returns 7 (not running), which fails the group; Stop then stops all.
func TestDummyMonitorFailure(t *testing.T) {
	dir := t.TempDir()
	g, _ := newGroup(t, dummyGroup(t, dir, 3, nil))
	if err := g.Start(context.Background(), 1, ""); err != nil {
		t.Fatal(err)
	}
	failed := g.Failed()
	os.Remove(statePath(dir, "r2"))
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("monitor failure not noticed")
	}
	err := g.Monitor(context.Background())
	var ee *ExitError
	if err == nil || !errors.As(err, &ee) || ee.Code != OCFNotRunning || !strings.Contains(err.Error(), "resource r2 monitor") {
		t.Fatalf("monitor error %v", err)
	}
	if s := g.Status()[1]; s.State != StateFailed || s.Failures != 1 {
		t.Errorf("r2 status %+v", s)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(statePath(dir, "r1")) || exists(statePath(dir, "r3")) {
		t.Error("not stopped")
	}
	// A new tenure starts clean.
	if err := g.Start(context.Background(), 2, ""); err != nil {
		t.Fatal(err)
	}
	if err := g.Monitor(context.Background()); err != nil {
		t.Errorf("monitor failure carried into the next tenure: %v", err)
	}
}

// TestProbeStopsLeftovers: on a node that is not primary, the probe finds
// r1 and r3 running (left from before a restart), stops them, and leaves
// the node eligible.
func TestProbeStopsLeftovers(t *testing.T) {
	dir := t.TempDir()
	g, rec := newGroup(t, dummyGroup(t, dir, 3, nil))
	for _, r := range []string{"r1", "r3"} {
		os.WriteFile(statePath(dir, r), nil, 0o644)
	}
	if err := g.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(statePath(dir, "r1")) || exists(statePath(dir, "r3")) {
		t.Error("leftovers still running")
	}
	if got := rec.events("probe: resource stopped"); !slices.Equal(got, []string{"r3", "r1"}) {
		t.Errorf("probe stopped %v", got)
	}
	for _, s := range g.Status() {
		if s.State != StateStopped || !strings.HasPrefix(s.LastResult, "probe:") {
			t.Errorf("%s: %+v", s.Name, s)
		}
	}
}
