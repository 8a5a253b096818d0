package exec

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
)

// metaAgent writes a FenceAgentAPI program whose metadata lists actions
// and whose status answers ON (exit 0).
func metaAgent(t *testing.T, actions string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence_meta")
	script := `#!/bin/sh
if [ "$1" = "-o" ] && [ "$2" = "metadata" ]; then
cat <<'XML'
<?xml version="1.0" ?>
<resource-agent name="fence_meta" shortdesc="metadata test">
<parameters>
	<parameter name="plug" unique="0" required="0"><content type="string" /><shortdesc lang="en">Plug</shortdesc></parameter>
</parameters>
<actions>` + actions + `</actions>
</resource-agent>
XML
exit 0
fi
cat >/dev/null
echo "Status: ON"
exit 0
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// The "on" action's on_target and automatic attributes decide whether the
// node runs it for itself at start (fence_scsi's metadata says both).
func TestUnfenceAtStartFromMetadata(t *testing.T) {
	cases := []struct {
		actions string
		want    bool
	}{
		{`<action name="on" on_target="1" automatic="1"/><action name="off"/><action name="status"/>`, true},
		{`<action name="on" on_target="true" automatic="true"/><action name="off"/><action name="status"/>`, true},
		{`<action name="on" on_target="1" automatic="0"/><action name="off"/><action name="status"/>`, false},
		{`<action name="on" automatic="1"/><action name="off"/><action name="status"/>`, false},
		{`<action name="on"/><action name="off"/><action name="status"/>`, false},
	}
	for _, tc := range cases {
		a := newAgent(t, agents.Params{"agent": metaAgent(t, tc.actions)})
		var _ agents.StartUnfencer = a
		if got := a.UnfenceAtStart(); got != tc.want {
			t.Errorf("%s: UnfenceAtStart = %v, want %v", tc.actions, got, tc.want)
		}
	}
	// The test agent's "on" is not automatic.
	p, _ := testParams(t)
	if newAgent(t, p).UnfenceAtStart() {
		t.Error("fence_testagent says unfence at start")
	}
}

// The real fence_scsi declares its "on" for the node itself.
func TestFenceScsiUnfencesAtStart(t *testing.T) {
	requireShortSkip(t)
	a, err := New(agents.Params{"agent": "fence_scsi", "plug": "node1", "devices": "/dev/null"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !a.UnfenceAtStart() {
		t.Error("fence_scsi: UnfenceAtStart = false")
	}
}

// A program without a monitor action is monitored by its status.
func TestMonitorFallsBackToStatus(t *testing.T) {
	a := newAgent(t, agents.Params{"agent": metaAgent(t, `<action name="on"/><action name="off"/><action name="status"/>`)})
	if err := a.Monitor(tctx(t, 30*time.Second)); err != nil {
		t.Fatalf("monitor without a monitor action: %v", err)
	}
}
