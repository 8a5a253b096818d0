package ipmi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

func startOpenIPMI(t *testing.T, cfg ipmisim.OpenIPMIConfig) *ipmisim.OpenIPMI {
	t.Helper()
	if testing.Short() {
		t.Skip("runs ipmi_sim")
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := ipmisim.StartOpenIPMI(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newAgent(t *testing.T, p agents.Params, log *slog.Logger) *Agent {
	t.Helper()
	a, err := New(p, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func simParams(host string, port int, cipher string) agents.Params {
	return agents.Params{"ip": host, "ipport": strconv.Itoa(port), "username": "admin", "password": "password", "cipher": cipher, "power_timeout": "10"}
}

func wantStatus(t *testing.T, a *Agent, want agents.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := a.Status(ctx)
	if err != nil || st != want {
		t.Fatalf("status = %v, %v; want %v", st, err, want)
	}
}

// Acceptance 1: the full sequence against OpenIPMI's ipmi_sim, cipher 3,
// where power-off really kills the host process.
func TestOpenIPMISequence(t *testing.T) {
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{KillWait: time.Second})
	var logBuf syncBuffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newAgent(t, simParams(sim.Host, sim.Port, "3"), log)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	wantStatus(t, a, agents.StateOn)
	pid := sim.HostPID()
	if pid == 0 {
		t.Fatal("host not running")
	}
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off: %v", err)
	}
	// Off returned success: the node must already be gone.
	if sim.HostRunning() {
		t.Fatal("off returned success while the host process is still alive")
	}
	wantStatus(t, a, agents.StateOff)
	// Off again is a no-op success, confirmed by the read-back.
	if err := a.Off(ctx); err != nil {
		t.Fatalf("second off: %v", err)
	}
	if err := a.On(ctx); err != nil {
		t.Fatalf("on: %v", err)
	}
	waitFor(t, "host back after on", sim.HostRunning)
	if sim.HostPID() == pid {
		t.Fatal("host PID unchanged after off/on")
	}
	wantStatus(t, a, agents.StateOn)
	pid = sim.HostPID()
	if err := a.Reboot(ctx); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	waitFor(t, "host back after reboot", sim.HostRunning)
	if sim.HostPID() == pid {
		t.Fatal("reboot did not restart the host process")
	}
	if err := a.Monitor(ctx); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	if strings.Contains(logBuf.String(), "password") {
		t.Fatalf("log mentions the password: %s", logBuf.String())
	}
}

// Acceptance 2: the same sequence against go-ipmi's reference BMC, cipher
// 17, whose power hooks start and kill a real process.
func TestReferenceBMCSequence(t *testing.T) {
	node := &nodeProcess{t: t}
	node.start()
	t.Cleanup(node.stop)
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{
		PoweredOn:  true,
		OnPowerOff: func() error { node.stop(); return nil },
		OnPowerOn:  func() error { node.start(); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	a := newAgent(t, simParams(bmc.Host(), bmc.Port(), "17"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	wantStatus(t, a, agents.StateOn)
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off: %v", err)
	}
	if node.running() || bmc.PoweredOn() {
		t.Fatal("off returned success while the node still runs")
	}
	wantStatus(t, a, agents.StateOff)
	if err := a.On(ctx); err != nil {
		t.Fatalf("on: %v", err)
	}
	if !node.running() {
		t.Fatal("on returned success but the node is not running")
	}
	wantStatus(t, a, agents.StateOn)
	before := bmc.PowerCommands()
	if err := a.Reboot(ctx); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if got := bmc.PowerCommands() - before; got != 2 || !node.running() || node.starts != 3 {
		t.Fatalf("reboot: %d power commands (want off and on), running %v, starts %d", got, node.running(), node.starts)
	}
	if err := a.Monitor(ctx); err != nil {
		t.Fatalf("monitor: %v", err)
	}
}

// A BMC that acknowledges power-off but never powers off must not be
// reported fenced.
func TestReferenceBMCIgnoresOff(t *testing.T) {
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	bmc.SetIgnorePowerOff(true)
	p := simParams(bmc.Host(), bmc.Port(), "17")
	p["power_timeout"] = "0.5"
	a := newAgent(t, p, nil)
	start := time.Now()
	err = a.Off(context.Background())
	if err == nil {
		t.Fatal("off succeeded on a BMC that never powers off")
	}
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "still reads on") {
		t.Fatalf("off error = %v", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("gave up after %v, before power_timeout", d)
	}
}

// Acceptance 3: a host that ignores SIGTERM is only off after ipmi_sim's
// kill_wait SIGKILL, and Off must not succeed before that.
func TestOpenIPMIHostIgnoresSIGTERM(t *testing.T) {
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{IgnoreSIGTERM: true, KillWait: 2 * time.Second})
	a := newAgent(t, simParams(sim.Host, sim.Port, "3"), nil)
	pid := sim.HostPID()
	if pid == 0 {
		t.Fatal("host not running")
	}
	start := time.Now()
	// Watch the host independently, to know when it really died.
	died := make(chan time.Duration, 1)
	go func() {
		for sim.HostPID() == pid {
			time.Sleep(5 * time.Millisecond)
		}
		died <- time.Since(start)
	}()
	if err := a.Off(context.Background()); err != nil {
		t.Fatalf("off: %v", err)
	}
	took := time.Since(start)
	if sim.HostRunning() {
		t.Fatalf("off returned after %v with the host still alive", took)
	}
	diedAfter := <-died
	if diedAfter > took {
		t.Fatalf("host died after %v, off returned after %v", diedAfter, took)
	}
	// The SIGTERM was ignored, so the death is the SIGKILL after kill_wait.
	if diedAfter < 1500*time.Millisecond {
		t.Fatalf("host died after %v, before kill_wait: did it ignore SIGTERM?", diedAfter)
	}
	t.Logf("host killed after %v, off confirmed after %v", diedAfter, took)
}

// Acceptance 4: wrong password fails fast as an authentication error.
func TestWrongPassword(t *testing.T) {
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{})
	for _, tc := range []struct {
		name   string
		p      agents.Params
		lanV15 bool
	}{
		{"reference-17", simParams(bmc.Host(), bmc.Port(), "17"), false},
		{"ipmi_sim-3", simParams(sim.Host, sim.Port, "3"), false},
		{"ipmi_sim-lan", simParams(sim.Host, sim.Port, "3"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p["password"] = "wrong-secret"
			if tc.lanV15 {
				tc.p["lanplus"] = "0"
				tc.p["command_timeout"] = "0.5"
			}
			a := newAgent(t, tc.p, nil)
			start := time.Now()
			err := a.Off(context.Background())
			took := time.Since(start)
			if !errors.Is(err, agents.ErrAuth) || !errors.Is(err, agents.ErrFailed) {
				t.Fatalf("off with a wrong password = %v; want an authentication failure", err)
			}
			// v1.5 BMCs drop a bad Activate Session instead of answering,
			// so that case costs the command timeout and retries.
			if limit := 2 * time.Second; took > limit && !tc.lanV15 || took > 3*time.Second {
				t.Fatalf("took %v to fail", took)
			}
			if strings.Contains(err.Error(), "wrong-secret") {
				t.Fatalf("error leaks the password: %v", err)
			}
			// Worded for a person (issue 24): what failed, where, and
			// what to check; not go-ipmi's cipher suites and RAKP steps.
			if !tc.lanV15 {
				want := "authentication failed at BMC " + tc.p["ip"] + ":" + tc.p["ipport"] + ` (check username "admin" and the password parameter)`
				if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "cipher suite") || strings.Contains(err.Error(), "RAKP") {
					t.Fatalf("wrong password: %q; want it to say %q, without go-ipmi's account", err, want)
				}
			}
		})
	}
	// With password_file, the message names the file to check.
	pw := filepath.Join(t.TempDir(), "bmc.pw")
	if err := os.WriteFile(pw, []byte("wrong-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := simParams(bmc.Host(), bmc.Port(), "17")
	delete(p, "password")
	p["password_file"] = pw
	err = newAgent(t, p, nil).Off(context.Background())
	if want := "check username \"admin\" and password_file " + pw; !errors.Is(err, agents.ErrAuth) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("wrong password from a file: %v; want it to say %q", err, want)
	}
	if !bmc.PoweredOn() || !sim.HostRunning() {
		t.Fatal("a wrong password powered something off")
	}
}

// Acceptance 4: an address that does not answer gives outcome unknown
// after the configured timeout.
func TestUnreachableIsUnknown(t *testing.T) {
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	bmc.SetSilent(true)
	p := simParams(bmc.Host(), bmc.Port(), "17")
	p["login_timeout"] = "1"
	p["command_timeout"] = "0.3"
	a := newAgent(t, p, nil)
	start := time.Now()
	err = a.Off(context.Background())
	took := time.Since(start)
	if err == nil || !errors.Is(err, agents.ErrOutcomeUnknown) || errors.Is(err, agents.ErrFailed) {
		t.Fatalf("off against a silent BMC = %v; want outcome unknown", err)
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("gave up after %v; login_timeout is 1s", took)
	}
}

// Silence after the off command was sent: the outcome is unknown, never
// failed (the node may be off) and never success.
func TestSilentAfterOffIsUnknown(t *testing.T) {
	// The callback runs on the simulator's goroutine: hand it the BMC
	// through an atomic (a socket between them is no happens-before edge).
	var self atomic.Pointer[ipmisim.BMC]
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true, OnPowerOff: func() error {
		self.Load().SetSilent(true) // the BMC reset itself while powering off
		return nil
	}})
	self.Store(bmc)
	if err != nil {
		t.Fatal(err)
	}
	self.Store(bmc)
	defer bmc.Close()
	p := simParams(bmc.Host(), bmc.Port(), "17")
	p["command_timeout"] = "0.2"
	p["command_retries"] = "1"
	p["power_timeout"] = "1"
	a := newAgent(t, p, nil)
	err = a.Off(context.Background())
	if !errors.Is(err, agents.ErrOutcomeUnknown) {
		t.Fatalf("off = %v; want outcome unknown", err)
	}
}

func TestKG(t *testing.T) {
	kg := []byte("0123456789abcdefghij")
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true, KG: kg})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	p := simParams(bmc.Host(), bmc.Port(), "17")
	p["login_timeout"] = "2"
	if _, err := newAgent(t, p, nil).Status(context.Background()); err == nil {
		t.Fatal("status without the Kg key succeeded")
	}
	p["hexadecimal_kg"] = "0x" + strings.ToUpper(hexOf(kg))
	st, err := newAgent(t, p, nil).Status(context.Background())
	if err != nil || st != agents.StateOn {
		t.Fatalf("status with Kg = %v, %v", st, err)
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestV15Lan(t *testing.T) {
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{})
	p := simParams(sim.Host, sim.Port, "3")
	p["lanplus"] = "0"
	st, err := newAgent(t, p, nil).Status(context.Background())
	if err != nil || st != agents.StateOn {
		t.Fatalf("v1.5 status = %v, %v", st, err)
	}
}

func TestParamsValidation(t *testing.T) {
	base := func() agents.Params { return agents.Params{"ip": "127.0.0.1", "username": "admin", "password": "x"} }
	for _, tc := range []struct {
		name, key, val, want string
	}{
		{"missing ip", "ip", "", "parameter ip"},
		{"cipher 0", "cipher", "0", "allow_cipher0"},
		{"cipher junk", "cipher", "x", "parameter cipher"},
		{"cipher 99", "cipher", "99", "not supported"},
		{"cipher 1", "cipher", "1", "signs no reply"},
		{"cipher 6", "cipher", "6", "signs no reply"},
		{"privlvl", "privlvl", "root", "parameter privlvl"},
		{"port", "ipport", "70000", "parameter ipport"},
		{"method cycle", "method", "cycle", "method: cycle is refused"},
		{"kg not hex", "hexadecimal_kg", "zz-secret-zz", "not hexadecimal"},
		{"unknown", "frobnicate", "1", "parameter frobnicate: unknown"},
		{"power_timeout", "power_timeout", "0", "power_timeout: must be > 0"},
		{"kg file", "hexadecimal_kg_file", "/etc/kg", "hexadecimal_kg_file: not supported"},
		{"lanplus", "lanplus", "maybe", "parameter lanplus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			if tc.val == "" {
				delete(p, tc.key)
			} else {
				p[tc.key] = tc.val
			}
			_, err := New(p, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") && tc.key == "hexadecimal_kg" {
				t.Fatalf("error leaks the key: %v", err)
			}
		})
	}
	var logBuf syncBuffer
	p := base()
	p["cipher"], p["allow_cipher0"] = "0", "1"
	if _, err := New(p, slog.New(slog.NewTextHandler(&logBuf, nil))); err != nil {
		t.Fatalf("cipher 0 allowed explicitly: %v", err)
	}
	if !strings.Contains(logBuf.String(), "cipher suite 0") {
		t.Fatalf("no warning for cipher 0: %q", logBuf.String())
	}
	// Several problems are reported at once.
	_, err := New(agents.Params{"cipher": "0", "privlvl": "root"}, nil)
	if err == nil || !strings.Contains(err.Error(), "ip: required") || !strings.Contains(err.Error(), "privlvl") || !strings.Contains(err.Error(), "cipher") {
		t.Fatalf("New = %v; want every problem", err)
	}
}

func TestPasswordFileAndScript(t *testing.T) {
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	f := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(f, []byte("password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, src := range []agents.Params{{"password_file": f}, {"password_script": "echo password"}} {
		p := simParams(bmc.Host(), bmc.Port(), "17")
		delete(p, "password")
		for k, v := range src {
			p[k] = v
		}
		if st, err := newAgent(t, p, nil).Status(context.Background()); err != nil || st != agents.StateOn {
			t.Fatalf("%v: status = %v, %v", src, st, err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nodeProcess is a real process standing for the node behind the
// reference BMC.
type nodeProcess struct {
	t      *testing.T
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
}

func (n *nodeProcess) start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command("sleep", "100000")
	if err := cmd.Start(); err != nil {
		n.t.Errorf("start node: %v", err)
		return
	}
	n.cmd, n.done, n.starts = cmd, make(chan struct{}), n.starts+1
	done := n.done
	go func() { _ = cmd.Wait(); close(done) }()
}

func (n *nodeProcess) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
	n.cmd = nil
}

func (n *nodeProcess) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ipmi_sim offers no suite 17 and refuses it with a two-byte answer go-ipmi
// cannot parse ("unpacked data is too short"): the agent still says what
// is wrong, as a failure the BMC answered, not an unreachable BMC.
func TestOpenIPMIWithoutSuite17(t *testing.T) {
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{})
	a := newAgent(t, simParams(sim.Host, sim.Port, "17"), nil)
	_, err := a.Status(ctxFor(t, 30*time.Second))
	if err == nil || agents.IsUnknown(err) || !strings.Contains(err.Error(), "does not offer cipher suite 17") {
		t.Fatalf("status with cipher 17 on ipmi_sim = %v; want a failure naming the suite", err)
	}
}

// A power command whose caller gave up is never sent again (found by
// daemon's TestProbeLeftoverIsFencedByTheHolder): go-ipmi returns when
// the context ends, but its exchange went on underneath, and the session's
// connection kept resending the power-off until its retries ran out. A
// fence cancelled because an admin confirmed its target down (or out of
// its device timeout) then powered the node off after it had been brought
// back, unrecorded.
func TestGivenUpPowerCommandIsNotResent(t *testing.T) {
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	p := simParams(bmc.Host(), bmc.Port(), "17")
	p["command_timeout"] = "1"
	p["command_retries"] = "3"
	a := newAgent(t, p, nil)
	// The round trip is learnt (about a millisecond): resends go out 0.2,
	// 0.6 and 1.4 s after the first copy.
	wantStatus(t, a, agents.StateOn)
	bmc.SetSilent(true)
	// Cancelled, as a fence is when its target is confirmed stopped (a
	// deadline would also end the wait on the socket: go-ipmi passes it on).
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(300*time.Millisecond, cancel).Stop()
	if _, err := a.Command(ctx, agents.StateOff); !errors.Is(err, agents.ErrOutcomeUnknown) {
		t.Fatalf("power off against a silent BMC = %v; want outcome unknown", err)
	}
	bmc.SetSilent(false)
	time.Sleep(2 * time.Second)
	if n := bmc.PowerCommands(); n != 0 || !bmc.PoweredOn() {
		t.Fatalf("the BMC carried out %d power command(s) after the caller gave up (powered on: %v)", n, bmc.PoweredOn())
	}
	// The agent goes on with a new session.
	wantStatus(t, a, agents.StateOn)
}
