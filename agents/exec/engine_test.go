package exec_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	fexec "github.com/fenced/fenced/agents/exec"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// The fence history gets the plugin's stderr, scrubbed of secrets.
func TestEngineRecordsScrubbedStderr(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("not-the-password-31\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent, _ := filepath.Abs("testdata/fence_testagent")
	reg := agents.NewRegistry()
	reg.Register(fexec.Kind())
	eng := stonith.NewEngine(reg, nil)
	eng.RetryDelay = 10 * time.Millisecond
	topo := stonith.Topology{{Devices: []stonith.Target{{
		Device: "plugin", Agent: "exec", Plug: "1", Timeout: 10 * time.Second,
		Params: agents.Params{"agent": agent, "ip": "127.0.0.1", "state_file": filepath.Join(dir, "state"), "password_file": pw},
	}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := eng.Fence(ctx, stonith.Request{Target: "n1", Topology: topo, Action: fencing.ActionOff, ID: 1, Epoch: 1})
	if rec.Outcome == fencing.OutcomeSuccess || len(rec.Attempts) == 0 {
		t.Fatalf("fence with a wrong password: %+v", rec)
	}
	at := rec.Attempts[0]
	if !strings.Contains(at.Stderr, "password ***** refused") {
		t.Fatalf("history stderr = %q", at.Stderr)
	}
	for _, s := range []string{at.Stderr, at.Error, rec.Error} {
		if strings.Contains(s, "not-the-password-31") {
			t.Fatalf("secret in the history: %q", s)
		}
	}

	if err := os.WriteFile(pw, []byte("letmein\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec = eng.Fence(ctx, stonith.Request{Target: "n1", Topology: topo, Action: fencing.ActionOff, ID: 2, Epoch: 1})
	if rec.Outcome != fencing.OutcomeSuccess {
		t.Fatalf("fence: %s %s", rec.Outcome, rec.Error)
	}
	if at := rec.Attempts[len(rec.Attempts)-1]; !strings.Contains(at.Stderr, "switching plug 1 off with password *****") {
		t.Fatalf("history stderr of a successful off = %q", at.Stderr)
	}
}
