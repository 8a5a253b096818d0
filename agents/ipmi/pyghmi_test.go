package ipmi

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

// The agent against a BMC on Debian's python3-pyghmi (the library under
// OpenStack VirtualBMC), an IPMI implementation independent of go-ipmi
// and of OpenIPMI. Like ipmi_sim, it is required: a missing
// python3-pyghmi fails these tests (make test-deps installs it), and only
// -short skips them.

// startPyghmi starts a pyghmi BMC for the test, closed at its end.
func startPyghmi(t *testing.T, cfg ipmisim.PyghmiConfig) *ipmisim.Pyghmi {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the pyghmi BMC")
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	b, err := ipmisim.StartPyghmi(ctxFor(t, 20*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// pyghmiStats reads the BMC's counters or fails the test.
func pyghmiStats(t *testing.T, b *ipmisim.Pyghmi) ipmisim.PyghmiStats {
	t.Helper()
	st, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Every action of the agent, with both suites, on an honest pyghmi BMC:
// status, off and its read-back, on, reboot, monitor, and the check and
// keep-alive of device health. Each suite runs on the algorithms it asked
// for (the BMC counts sessions by suite and would count a downgrade).
func TestPyghmiSequence(t *testing.T) {
	for _, cipher := range []string{"17", "3"} {
		t.Run("cipher"+cipher, func(t *testing.T) {
			b := startPyghmi(t, ipmisim.PyghmiConfig{})
			var logBuf syncBuffer
			a := newAgent(t, simParams(b.Host(), b.Port(), cipher), slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			ctx := ctxFor(t, 60*time.Second)

			wantStatus(t, a, agents.StateOn)
			if err := a.Off(ctx); err != nil {
				t.Fatalf("off: %v", err)
			}
			if st := pyghmiStats(t, b); st.Power || st.PowerCommands != 1 {
				t.Fatalf("off returned success; the BMC reads power %v after %d power commands", st.Power, st.PowerCommands)
			}
			wantStatus(t, a, agents.StateOff)
			if err := a.Off(ctx); err != nil {
				t.Fatalf("second off: %v", err)
			}
			if err := a.On(ctx); err != nil {
				t.Fatalf("on: %v", err)
			}
			wantStatus(t, a, agents.StateOn)
			before := pyghmiStats(t, b).PowerCommands
			if err := a.Reboot(ctx); err != nil {
				t.Fatalf("reboot: %v", err)
			}
			if st := pyghmiStats(t, b); st.PowerCommands-before != 2 || !st.Power {
				t.Fatalf("reboot: %d power commands (want off and on), power %v", st.PowerCommands-before, st.Power)
			}
			if err := a.Monitor(ctx); err != nil {
				t.Fatalf("monitor: %v", err)
			}
			if err := a.Check(ctx, true); err != nil || !a.Holds() {
				t.Fatalf("check: %v (holds %v)", err, a.Holds())
			}
			if err := a.KeepAlive(ctx); err != nil {
				t.Fatalf("keep-alive: %v", err)
			}
			if err := a.Check(ctx, false); err != nil || a.Holds() {
				t.Fatalf("check without keep: %v (holds %v)", err, a.Holds())
			}
			// Check logged the replaced and the checked session out.
			st := pyghmiStats(t, b)
			if st.Sessions != 0 {
				log, _ := os.ReadFile(filepath.Join(b.Dir(), "pyghmi_bmc.log"))
				t.Fatalf("%d sessions left open on the BMC: %s\n%s", st.Sessions, log, logBuf.String())
			}
			if st.Established == 0 || st.BySuite[cipher] != st.Established || st.Downgraded != 0 {
				t.Fatalf("sessions by suite %v, %d established, %d downgraded; want all on suite %s", st.BySuite, st.Established, st.Downgraded, cipher)
			}

			p := simParams(b.Host(), b.Port(), cipher)
			p["password"] = "wrong-secret"
			start := time.Now()
			err := newAgent(t, p, nil).Off(ctx)
			if !errors.Is(err, agents.ErrAuth) || time.Since(start) > 2*time.Second {
				t.Fatalf("off with a wrong password = %v after %v; want an authentication failure at once", err, time.Since(start))
			}
			if strings.Contains(err.Error(), "wrong-secret") {
				t.Fatalf("error leaks the password: %v", err)
			}
			p = simParams(b.Host(), b.Port(), cipher)
			p["username"] = "nobody"
			if err := newAgent(t, p, nil).Off(ctx); !errors.Is(err, agents.ErrAuth) || !strings.Contains(err.Error(), "Unauthorized name") {
				t.Fatalf("off as an unknown user = %v; want the BMC's refusal of the name", err)
			}
			if !pyghmiStats(t, b).Power {
				t.Fatal("a wrong password or user powered the chassis off")
			}
		})
	}
}

// A BMC whose state lags the command (reads on for a second after
// power-off): off succeeds only once the read-back says off.
func TestPyghmiStateLagsPowerOff(t *testing.T) {
	b := startPyghmi(t, ipmisim.PyghmiConfig{OffDelay: time.Second})
	a := newAgent(t, simParams(b.Host(), b.Port(), "17"), nil)
	start := time.Now()
	if err := a.Off(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatalf("off: %v", err)
	}
	took := time.Since(start)
	if on, err := b.PoweredOn(); err != nil || on {
		t.Fatalf("off returned after %v; the BMC reads on %v (%v)", took, on, err)
	}
	if took < time.Second {
		t.Fatalf("off returned after %v, before the state read off", took)
	}
}

// A BMC that offers suite 3 only: the agent works with cipher=3, and with
// cipher=17 it fails with an error that names the suite and the BMC's
// refusal, sending nothing to the chassis.
func TestPyghmiNoSuite17(t *testing.T) {
	b := startPyghmi(t, ipmisim.PyghmiConfig{NoSuite17: true})
	ctx := ctxFor(t, 60*time.Second)
	a := newAgent(t, simParams(b.Host(), b.Port(), "3"), nil)
	wantStatus(t, a, agents.StateOn)
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off with cipher 3: %v", err)
	}
	if err := a.On(ctx); err != nil {
		t.Fatalf("on with cipher 3: %v", err)
	}
	if err := a.Check(ctx, true); err != nil {
		t.Fatalf("check with cipher 3: %v", err)
	}
	before := pyghmiStats(t, b)

	a17 := newAgent(t, simParams(b.Host(), b.Port(), "17"), nil)
	err := a17.Off(ctx)
	if err == nil {
		t.Fatal("off with cipher 17 succeeded on a BMC without suite 17")
	}
	// A configuration problem the BMC answered, not an unreachable BMC.
	for _, want := range []string{"does not offer cipher suite 17", "No Cipher Suite match", "set cipher"} {
		if !strings.Contains(err.Error(), want) || agents.IsUnknown(err) {
			t.Fatalf("off with cipher 17 = %v; want a failure saying %q", err, want)
		}
	}
	if err := a17.Check(ctx, false); err == nil {
		t.Fatal("check with cipher 17 succeeded on a BMC without suite 17")
	}
	after := pyghmiStats(t, b)
	if after.PowerCommands != before.PowerCommands || !after.Power || after.Refused < 2 {
		t.Fatalf("cipher 17: %d power commands sent, power %v, %d Open Sessions refused", after.PowerCommands-before.PowerCommands, after.Power, after.Refused)
	}
}

// Issue 23, item 4: a BMC whose Get Device ID reply is malformed (pyghmi's
// own, 14 bytes, as on OpenStack VirtualBMC) must not fail monitor, device
// checks or keep-alives: none of them needs that command.
func TestPyghmiMalformedDeviceID(t *testing.T) {
	b := startPyghmi(t, ipmisim.PyghmiConfig{MalformedDeviceID: true})
	ctx := ctxFor(t, 60*time.Second)

	// The quirk is there: go-ipmi itself refuses the reply.
	c, err := client.NewClient(b.Host(), b.Port(), "admin", "password")
	if err != nil {
		t.Fatal(err)
	}
	c.WithInterface(client.InterfaceLanplus).WithCipherSuiteID(17).WithTimeout(2 * time.Second)
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetDeviceID(ctx)
	c.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "(14/15)") {
		t.Fatalf("Get Device ID = %v; want go-ipmi's refusal of 14 bytes", err)
	}

	a := newAgent(t, simParams(b.Host(), b.Port(), "17"), nil)
	wantStatus(t, a, agents.StateOn) // holds a session for the keep-alive
	if err := a.KeepAlive(ctx); err != nil {
		t.Errorf("keep-alive: %v", err)
	}
	if err := a.Monitor(ctx); err != nil {
		t.Errorf("monitor: %v", err)
	}
	if err := a.Check(ctx, true); err != nil || !a.Holds() {
		t.Errorf("check: %v (holds %v)", err, a.Holds())
	}
	if err := a.Check(ctx, false); err != nil {
		t.Errorf("check without keep: %v", err)
	}
	if err := a.Off(ctx); err != nil {
		t.Fatalf("off: %v", err)
	}
	if on, err := b.PoweredOn(); err != nil || on {
		t.Fatalf("after off the BMC reads on %v (%v)", on, err)
	}
}

// hostilePyghmi are the BMCs the agent must refuse (issue 23, items 1 to
// 3; the refusals are transport.go's business). Each entry says how to
// tell that the BMC really misbehaved towards the agent (its counters),
// so that a test of a refusal cannot pass against a BMC that behaved.
var hostilePyghmi = []struct {
	name   string
	cfg    ipmisim.PyghmiConfig
	acted  func(ipmisim.PyghmiStats) bool
	cipher string
	want   string // what the agent's refusal says
}{
	{"no integrity, every reply", ipmisim.PyghmiConfig{NoIntegrity: true},
		func(s ipmisim.PyghmiStats) bool { return s.HostileReplies > 0 }, "17", "no integrity code"},
	{"no integrity, status forged off", ipmisim.PyghmiConfig{NoIntegrity: true, ForgeOff: true, HostileCommands: []ipmisim.Command{ipmisim.CmdGetChassisStatus}},
		func(s ipmisim.PyghmiStats) bool { return s.ForgedOff > 0 }, "17", "no integrity code"},
	{"bad integrity, every reply", ipmisim.PyghmiConfig{BadIntegrity: true},
		func(s ipmisim.PyghmiStats) bool { return s.HostileReplies > 0 }, "17", "integrity code does not verify"},
	{"bad integrity, status forged off", ipmisim.PyghmiConfig{BadIntegrity: true, ForgeOff: true, HostileCommands: []ipmisim.Command{ipmisim.CmdGetChassisStatus}},
		func(s ipmisim.PyghmiStats) bool { return s.ForgedOff > 0 }, "3", "integrity code does not verify"},
	{"suite 17 downgraded to 3", ipmisim.PyghmiConfig{Downgrade: true},
		func(s ipmisim.PyghmiStats) bool { return s.Downgraded > 0 }, "17", "the BMC answered suite 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128)"},
	{"RAKP 2 without its code", ipmisim.PyghmiConfig{SkipPassword: true},
		func(s ipmisim.PyghmiStats) bool { return s.SkippedPassword > 0 }, "17", "skipped the password check"},
	{"RAKP-none", ipmisim.PyghmiConfig{RAKPNone: true},
		func(s ipmisim.PyghmiStats) bool { return s.Downgraded > 0 }, "17", "the BMC answered RAKP-none"},
}

// Each hostile BMC, an implementation nobody on this project wrote
// (pyghmi's server, patched to misbehave), misbehaves towards the agent's
// own requests, and the agent refuses it (integrity.go): no power-off is
// believed that the BMC did not carry out, and the error says what was
// refused. go-ipmi alone takes the replies without integrity, the
// downgrade and the forged "off".
func TestPyghmiHostileBMCsAreRefused(t *testing.T) {
	for _, h := range hostilePyghmi {
		t.Run(h.name, func(t *testing.T) {
			b := startPyghmi(t, h.cfg)
			p := simParams(b.Host(), b.Port(), h.cipher)
			p["login_timeout"], p["command_timeout"], p["power_timeout"] = "2", "0.5", "2"
			a := newAgent(t, p, nil)
			err := a.Off(ctxFor(t, 30*time.Second))
			st := pyghmiStats(t, b)
			if !h.acted(st) {
				t.Fatalf("the BMC did not misbehave: %+v (off: %v)", st, err)
			}
			if err == nil {
				t.Fatalf("off succeeded against a hostile BMC (powered on: %v): %+v", st.Power, st)
			}
			if !strings.Contains(err.Error(), h.want) || errors.Is(err, agents.ErrAuth) {
				t.Fatalf("off = %v; want a refusal naming %q, not an authentication failure", err, h.want)
			}
			if st.Power && st.PowerCommands > 0 && h.cfg.ForgeOff {
				t.Fatalf("a power command reached a BMC whose forged status was believed: %+v", st)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestMeasurePyghmiOff times off + confirmed read-back on the pyghmi BMC
// (cipher 17), 10 runs each: the agent logging in for the fence (cold),
// the agent on a session a device check holds (warm, as the daemon
// fences), Debian's fence_ipmilan -o off, and ipmitool's chassis power off
// then chassis power status until it reads off. It measures and asserts
// nothing about time; it runs only with FENCED_MEASURE=1.
func TestMeasurePyghmiOff(t *testing.T) {
	if os.Getenv("FENCED_MEASURE") == "" {
		t.Skip("set FENCED_MEASURE=1 to measure")
	}
	for _, tool := range []string{"fence_ipmilan", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test-deps): %v", tool, err)
		}
	}
	const runs = 10
	b := startPyghmi(t, ipmisim.PyghmiConfig{})
	ctx := ctxFor(t, 10*time.Minute)
	powerOn := func() {
		t.Helper()
		if err := b.SetPower(true); err != nil {
			t.Fatal(err)
		}
	}
	wantOff := func(who string) {
		t.Helper()
		if on, err := b.PoweredOn(); err != nil || on {
			t.Fatalf("%s returned with the BMC reading on %v (%v)", who, on, err)
		}
	}
	ipmitoolCmd := func(args ...string) *exec.Cmd {
		base := []string{"-I", "lanplus", "-H", b.Host(), "-p", strconv.Itoa(b.Port()), "-U", "admin", "-E", "-C", "17"}
		cmd := exec.CommandContext(ctx, "ipmitool", append(base, args...)...)
		cmd.Env = append(os.Environ(), "IPMI_PASSWORD=password")
		return cmd
	}
	results := map[string][]time.Duration{}
	time1 := func(name string, off func() error) {
		powerOn()
		start := time.Now()
		if err := off(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		results[name] = append(results[name], time.Since(start))
		wantOff(name)
	}
	warm := newAgent(t, simParams(b.Host(), b.Port(), "17"), nil)
	for i := 0; i < runs; i++ {
		time1("fenced, cold session", func() error {
			a, err := New(simParams(b.Host(), b.Port(), "17"), nil)
			if err != nil {
				return err
			}
			defer a.Close()
			return a.Off(ctx)
		})
		if err := warm.Check(ctx, true); err != nil {
			t.Fatal(err)
		}
		time1("fenced, warm session", func() error { return warm.Off(ctx) })
		time1("fence_ipmilan", func() error {
			cmd := exec.CommandContext(ctx, "fence_ipmilan")
			cmd.Stdin = strings.NewReader(fmt.Sprintf("action=off\nip=%s\nipport=%d\nusername=admin\npassword=password\nlanplus=1\ncipher=17\n", b.Host(), b.Port()))
			cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore::DeprecationWarning")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		time1("ipmitool", func() error {
			if out, err := ipmitoolCmd("chassis", "power", "off").CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			for {
				out, err := ipmitoolCmd("chassis", "power", "status").CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				if strings.Contains(string(out), "is off") {
					return nil
				}
			}
		})
	}
	t.Logf("off + confirmed read-back, pyghmi BMC, cipher 17, %d runs each:", runs)
	for _, name := range []string{"fenced, cold session", "fenced, warm session", "fence_ipmilan", "ipmitool"} {
		t.Logf("  %-22s median %v  (runs %v)", name+":", median(results[name]).Round(100*time.Microsecond), roundAll(results[name]))
	}
}
