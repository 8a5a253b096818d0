package resource

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
)

// leakyAgent prints its password and fails every action but meta-data.
const leakyAgent = `#!/bin/sh
case "$1" in
meta-data) cat <<'END'
<?xml version="1.0"?>
<resource-agent name="Leaky"><parameters>
<parameter name="password" required="1"><content type="string"/></parameter>
<parameter name="port"><content type="integer" default="5432"/></parameter>
</parameters><actions><action name="start" timeout="3s"/><action name="stop"/><action name="monitor" interval="5s"/></actions></resource-agent>
END
exit 0;;
esac
echo "connecting with password $OCF_RESKEY_password instance $OCF_RESOURCE_INSTANCE type $OCF_RESOURCE_TYPE provider $OCF_RESOURCE_PROVIDER timeout $OCF_RESKEY_CRM_meta_timeout epoch $FENCED_EPOCH prev $FENCED_PREVIOUS_HOLDER node $FENCED_NODE" >&2
echo "ocf-exit-reason:cannot log in as $OCF_RESKEY_password" >&2
exit 6
`

func testRoot(t *testing.T, agents map[string]string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "ocf")
	os.MkdirAll(filepath.Join(root, "resource.d", "test"), 0o755)
	os.Symlink(filepath.Join(config.DefaultOCFRoot, "lib"), filepath.Join(root, "lib"))
	for name, script := range agents {
		if err := os.WriteFile(filepath.Join(root, "resource.d", "test", name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestAgentEnvironmentAndSecrets: the agent sees the OCF variables and the
// token; its exit code keeps its OCF meaning; the password it prints never
// reaches the error; meta-data's advised start timeout is used.
func TestAgentEnvironmentAndSecrets(t *testing.T) {
	const secret = "s3cr3t-pw"
	cfg := config.Default()
	cfg.OCFRoot = testRoot(t, map[string]string{"Leaky": leakyAgent})
	cfg.Resources = []config.Resource{{Name: "db", OCF: "test:Leaky", Params: map[string]string{"password": secret}}}
	g, err := New(context.Background(), cfg, "node7", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if e := g.members[0]; e.timeouts.start != 3*time.Second || e.timeouts.stop != DefaultTimeout || e.interval != 5*time.Second {
		t.Errorf("timeouts %+v interval %s: want the meta-data's 3s start, 20s stop, 5s interval", e.timeouts, e.interval)
	}
	err = g.Start(context.Background(), 42, "node2")
	if err == nil {
		t.Fatal("start succeeded")
	}
	msg := err.Error()
	if strings.Contains(msg, secret) {
		t.Errorf("secret in the error: %s", msg)
	}
	for _, want := range []string{"test:Leaky start: exit 6 (not configured): cannot log in as ***"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	a := g.members[0].m.(*ocfAgent)
	res, err := a.run(context.Background(), "monitor", 5*time.Second, token{epoch: 42, previous: "node2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"password *** instance db type Leaky provider test timeout 20000 epoch 42 prev node2 node node7"} {
		if !strings.Contains(res.output, want) {
			t.Errorf("agent output %q lacks %q", res.output, want)
		}
	}
	if res.code != OCFErrConfigured || res.reason != "cannot log in as ***" {
		t.Errorf("result %+v", res)
	}
	// A check error never quotes a secret either.
	cfg.Resources[0].Params["password_port"] = "x"
	ps := Check(context.Background(), cfg)
	if strings.Contains(ps.Error(), secret) {
		t.Errorf("secret in check problems: %v", ps)
	}
}

func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(`<?xml version="1.0"?><!DOCTYPE resource-agent SYSTEM "ra-api-1.dtd"><resource-agent name="D"><parameters><parameter name="state" unique="1"><content type="string" default="x"/></parameter></parameters><actions><action name="start" timeout="20s"/></actions></resource-agent>`))
	f.Add([]byte(`log line\n<resource-agent name="x"><parameters><parameter name=""/></parameters></resource-agent>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMetadataBytes(b)
		if err != nil {
			return
		}
		if m.Name == "" {
			t.Fatal("accepted a document without a name")
		}
		for _, a := range m.Actions {
			m.Advised(a.Name)
		}
		checkParams("x:y", m, map[string]string{"a": "1"})
	})
}

func TestParseOCFDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"20s": 20 * time.Second, "20": 20 * time.Second, "500ms": 500 * time.Millisecond,
		"2m": 2 * time.Minute, "2min": 2 * time.Minute, "1h": time.Hour, "1.5s": 1500 * time.Millisecond} {
		if got, err := parseOCFDuration(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "s", "-1s", "10 parsecs", "1e9"} {
		if _, err := parseOCFDuration(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// slowAgent's start hangs; stop and monitor work.
const slowAgent = `#!/bin/sh
case "$1" in
meta-data) cat <<'END'
<resource-agent name="Slow"><parameters><parameter name="state" required="1"><content type="string"/></parameter></parameters>
<actions><action name="start" timeout="60s"/><action name="stop" timeout="5s"/><action name="monitor" timeout="5s"/></actions></resource-agent>
END
exit 0;;
start) touch "$OCF_RESKEY_state"; sleep 3600; exit 0;;
stop) rm -f "$OCF_RESKEY_state"; exit 0;;
monitor) [ -e "$OCF_RESKEY_state" ] && exit 0; exit 7;;
esac
exit 3
`

// TestStartCutShort: a demotion cancels a start that hangs; Start returns
// at once without a rollback, a Stop whose deadline passes while the
// start still runs fails (the node would self-fence), and the next Stop
// stops what was started, the half-started resource included.
func TestStartCutShort(t *testing.T) {
	needAgent(t, dummy)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.OCFRoot = testRoot(t, map[string]string{"Slow": slowAgent})
	os.Symlink(filepath.Join(config.DefaultOCFRoot, "resource.d", "heartbeat"), filepath.Join(cfg.OCFRoot, "resource.d", "heartbeat"))
	cfg.Resources = []config.Resource{
		{Name: "base", OCF: dummy, Params: map[string]string{"state": filepath.Join(dir, "base")}},
		{Name: "slow", OCF: "test:Slow", Params: map[string]string{"state": filepath.Join(dir, "slow")}},
	}
	g, err := New(context.Background(), cfg, "n", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- g.Start(ctx, 5, "") }()
	for !exists(filepath.Join(dir, "slow")) {
		time.Sleep(10 * time.Millisecond)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = g.Stop(sctx)
	scancel()
	if err == nil || !strings.Contains(err.Error(), "another start, stop or probe still runs") {
		t.Errorf("stop during a running start: %v", err)
	}
	t0 := time.Now()
	cancel()
	select {
	case err := <-started:
		if err == nil || time.Since(t0) > 2*time.Second {
			t.Errorf("cut-short start returned %v after %s", err, time.Since(t0))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("start did not return after its context ended")
	}
	if got := states(g); strings.Join(got, " ") != "base=running slow=failed" {
		t.Errorf("states after the cut-short start %v", got)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(dir, "base")) || exists(filepath.Join(dir, "slow")) {
		t.Error("Stop left something running")
	}
}
