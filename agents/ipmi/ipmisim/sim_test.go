package ipmisim

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ipmitool is an independent client: these tests check the simulators
// themselves, so the agent's tests can trust them.
func ipmitool(t *testing.T, port int, cipher string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("ipmitool"); err != nil {
		t.Fatalf("ipmitool not installed (make test-deps): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := []string{"-I", "lanplus", "-H", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "admin", "-E", "-C", cipher, "-N", "1", "-R", "1"}
	cmd := exec.CommandContext(ctx, "ipmitool", append(base, args...)...)
	// -E reads the password from the environment, keeping it off argv.
	cmd.Env = append(cmd.Environ(), "IPMI_PASSWORD=password")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestBMCPowerHooks(t *testing.T) {
	var offs, ons int
	b, err := StartBMC(BMCConfig{PoweredOn: true, OnPowerOff: func() error { offs++; return nil }, OnPowerOn: func() error { ons++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, cipher := range []string{"17", "3"} {
		out, err := ipmitool(t, b.Port(), cipher, "chassis", "power", "status")
		if err != nil || !strings.Contains(out, "is on") {
			t.Fatalf("cipher %s status: %v: %s", cipher, err, out)
		}
	}
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "off"); err != nil {
		t.Fatalf("off: %v: %s", err, out)
	}
	if b.PoweredOn() || offs != 1 {
		t.Fatalf("after off: on=%v hooks=%d", b.PoweredOn(), offs)
	}
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "status"); err != nil || !strings.Contains(out, "is off") {
		t.Fatalf("status after off: %v: %s", err, out)
	}
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "on"); err != nil || !b.PoweredOn() || ons != 1 {
		t.Fatalf("on: %v: %s (on=%v hooks=%d)", err, out, b.PoweredOn(), ons)
	}

	b.SetIgnorePowerOff(true)
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "off"); err != nil {
		t.Fatalf("ignored off: %v: %s", err, out)
	}
	if !b.PoweredOn() || offs != 1 {
		t.Fatalf("ignore-off fault powered off")
	}
	b.SetSilent(true)
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "status"); err == nil {
		t.Fatalf("silent BMC answered: %s", out)
	}
}

func TestStartBMCRejectsNonLoopback(t *testing.T) {
	if _, err := StartBMC(BMCConfig{Addr: "0.0.0.0:0"}); err == nil {
		t.Fatal("bound a non-loopback address")
	}
}

func TestOpenIPMIPowerKillsHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ipmi_sim")
	}
	s, err := StartOpenIPMI(context.Background(), OpenIPMIConfig{Dir: t.TempDir(), KillWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pid := s.HostPID()
	if pid == 0 {
		t.Fatal("host not running after start")
	}
	if out, err := ipmitool(t, s.Port, "3", "chassis", "power", "off"); err != nil {
		t.Fatalf("off: %v: %s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.HostRunning() {
		if time.Now().After(deadline) {
			t.Fatal("host still running 5s after power off")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := ipmitool(t, s.Port, "3", "chassis", "power", "on"); err != nil {
		t.Fatalf("on: %v: %s", err, out)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !s.HostRunning() {
		if time.Now().After(deadline) {
			t.Fatal("host not back 5s after power on")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.HostPID() == pid {
		t.Fatal("same host PID after power cycle")
	}
	last := s.HostPID()
	s.Close()
	if processAlive(last) {
		t.Fatal("Close left the host running")
	}
}

// A changed password refuses the old one from the next session on.
func TestBMCSetPassword(t *testing.T) {
	b, err := StartBMC(BMCConfig{PoweredOn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "status"); err != nil {
		t.Fatalf("status: %v: %s", err, out)
	}
	if err := b.SetPassword("rotated"); err != nil {
		t.Fatal(err)
	}
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "status"); err == nil {
		t.Fatalf("old password accepted after the change: %s", out)
	}
	if err := b.SetPassword("password"); err != nil {
		t.Fatal(err)
	}
	if out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "status"); err != nil {
		t.Fatalf("after restoring the password: %v: %s", err, out)
	}
}
