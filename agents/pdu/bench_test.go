package pdu

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"testing"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/pdu/pdutest"
)

// BenchmarkOffConfirm measures one off with read-back by this agent; compare
// with BenchmarkFenceApcSnmpOff against the same simulator data.
func BenchmarkOffConfirm(b *testing.B) {
	sim := pdutest.Start(b, pdutest.Options{DataDir: "testdata/apc"})
	a, err := New(agents.Params{"ip": sim.Host, "ipport": strconv.Itoa(sim.Port), "snmp_version": "2c", "plug": "2"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		if err := a.On(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := a.Off(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFenceApcSnmpOff runs Debian's fence_apc_snmp -o off directly
// (it also reads the outlet back before exiting 0).
func BenchmarkFenceApcSnmpOff(b *testing.B) {
	if _, err := exec.LookPath("fence_apc_snmp"); err != nil {
		b.Fatalf("fence_apc_snmp not installed (Debian fence-agents): %v", err)
	}
	sim := pdutest.Start(b, pdutest.Options{DataDir: "testdata/apc"})
	run := func(action string) {
		cmd := exec.Command("fence_apc_snmp")
		cmd.Env = append(cmd.Environ(), "PYTHONWARNINGS=ignore::DeprecationWarning")
		cmd.Stdin = bytes.NewBufferString("action=" + action + "\nip=" + sim.Host + "\nipport=" + strconv.Itoa(sim.Port) +
			"\ncommunity=private\nsnmp_version=2c\nplug=2\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("fence_apc_snmp %s: %v: %s", action, err, out)
		}
	}
	for b.Loop() {
		b.StopTimer()
		run("on")
		b.StartTimer()
		run("off")
	}
}
