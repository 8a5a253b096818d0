package exec

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/pdu/pdutest"
)

// Adapter overhead: the same status query run through the adapter and run
// directly, with the shell test agent (cheap, so the overhead shows) and
// with Debian's fence_apc_snmp against snmpsim.

func runDirect(b *testing.B, path, stdin string, wantExit int) {
	cmd := exec.Command(path)
	cmd.Env = append(cmd.Environ(), "PYTHONWARNINGS=ignore::DeprecationWarning")
	cmd.Stdin = bytes.NewBufferString(stdin)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != wantExit {
		b.Fatalf("%s: %v: %s", path, err, out)
	}
}

func benchTestAgent(b *testing.B) (agents.Params, string) {
	state := b.TempDir() + "/state"
	p := agents.Params{"agent": "", "ip": "127.0.0.1", "plug": "2", "password": password, "state_file": state}
	stdin := "action=status\nip=127.0.0.1\nplug=2\npassword=" + password + "\nstate_file=" + state + "\n"
	return p, stdin
}

func BenchmarkTestAgentStatusDirect(b *testing.B) {
	_, stdin := benchTestAgent(b)
	for b.Loop() {
		runDirect(b, "testdata/fence_testagent", stdin, 0)
	}
}

func BenchmarkTestAgentStatusAdapter(b *testing.B) {
	p, _ := benchTestAgent(b)
	var err error
	if p["agent"], err = filepath.Abs("testdata/fence_testagent"); err != nil {
		b.Fatal(err)
	}
	a, err := New(p, nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if st, err := a.Status(context.Background()); err != nil || st != agents.StateOn {
			b.Fatal(st, err)
		}
	}
}

func apcSim(b *testing.B) (*pdutest.Sim, string) {
	if _, err := exec.LookPath("fence_apc_snmp"); err != nil {
		b.Fatalf("fence_apc_snmp not installed (Debian fence-agents): %v", err)
	}
	sim := pdutest.Start(b, pdutest.Options{DataDir: "../pdu/testdata/apc"})
	return sim, "ip=" + sim.Host + "\nipport=" + strconv.Itoa(sim.Port) + "\ncommunity=private\nsnmp_version=2c\nplug=2\n"
}

func BenchmarkFenceApcSnmpStatusDirect(b *testing.B) {
	_, params := apcSim(b)
	for b.Loop() {
		runDirect(b, "/usr/sbin/fence_apc_snmp", "action=status\n"+params, 0)
	}
}

func BenchmarkFenceApcSnmpStatusAdapter(b *testing.B) {
	sim, _ := apcSim(b)
	a, err := New(agents.Params{"agent": "fence_apc_snmp", "ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "community": "private", "snmp_version": "2c", "plug": "2"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if st, err := a.Status(context.Background()); err != nil || st != agents.StateOn {
			b.Fatal(st, err)
		}
	}
}

// Off through the adapter includes its own status read-back; direct off
// does not.
func BenchmarkFenceApcSnmpOffDirect(b *testing.B) {
	_, params := apcSim(b)
	for b.Loop() {
		b.StopTimer()
		runDirect(b, "/usr/sbin/fence_apc_snmp", "action=on\n"+params, 0)
		b.StartTimer()
		runDirect(b, "/usr/sbin/fence_apc_snmp", "action=off\n"+params, 0)
	}
}

func BenchmarkFenceApcSnmpOffAdapter(b *testing.B) {
	sim, params := apcSim(b)
	a, err := New(agents.Params{"agent": "fence_apc_snmp", "ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "community": "private", "snmp_version": "2c", "plug": "2"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		runDirect(b, "/usr/sbin/fence_apc_snmp", "action=on\n"+params, 0)
		b.StartTimer()
		if err := a.Off(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
