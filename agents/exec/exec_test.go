package exec

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
)

const password = "letmein"

func testdata(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func secretFile(t *testing.T, value string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// testParams configures testdata/fence_testagent with its state in a
// fresh file.
func testParams(t *testing.T, extra ...string) (agents.Params, string) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	p := agents.Params{
		"agent": testdata(t, "fence_testagent"), "ip": "127.0.0.1", "plug": "2",
		"password_file": secretFile(t, password), "state_file": state,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p, state
}

func newAgent(t *testing.T, p agents.Params) *Agent {
	t.Helper()
	a, err := New(p, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func tctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func wantState(t *testing.T, a *Agent, want agents.State) {
	t.Helper()
	st, err := a.Status(tctx(t, 30*time.Second))
	if err != nil || st != want {
		t.Fatalf("status = %v, %v; want %v", st, err, want)
	}
}

func readFile(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestTestAgentLifecycle(t *testing.T) {
	p, state := testParams(t)
	a := newAgent(t, p)
	wantState(t, a, agents.StateOn)
	if err := a.Off(tctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s := readFile(t, state); s != "off" {
		t.Fatalf("state file = %q after off", s)
	}
	wantState(t, a, agents.StateOff)
	if err := a.On(tctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := a.Reboot(tctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantState(t, a, agents.StateOn)
	ports, err := a.List(tctx(t, 30*time.Second))
	if err != nil || len(ports) != 2 || ports[1] != (agents.Port{ID: "2", Alias: "node2"}) {
		t.Fatalf("list = %+v, %v", ports, err)
	}
	if err := a.Monitor(tctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Parameters went on stdin: the program's command line is bare.
	if argv := readFile(t, state+".argv"); strings.Contains(argv, password) || strings.Contains(argv, "=") {
		t.Fatalf("command line carried parameters: %q", argv)
	}
	// The agent printed the password on stderr; what we keep is scrubbed.
	if err := a.Off(tctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := a.On(tctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	// LastStderr is on's, not that of the status read-back after it.
	if got := a.LastStderr(); strings.Contains(got, password) || !strings.Contains(got, "switching plug 2 on with password *****") {
		t.Fatalf("LastStderr = %q: not on's, or not scrubbed", got)
	}
}

func TestByNameFromPluginDir(t *testing.T) {
	p, _ := testParams(t, "plugin_dir", testdata(t, ""))
	p["agent"] = "fence_testagent"
	a := newAgent(t, p)
	if a.Path() != testdata(t, "fence_testagent") {
		t.Fatalf("resolved %s", a.Path())
	}
	wantState(t, a, agents.StateOn)
	// Through the registry, as config validation does.
	k, ok := agents.Default.Lookup("exec")
	if !ok {
		t.Fatal("exec not registered")
	}
	if _, err := k.New(p, nil); err != nil {
		t.Fatal(err)
	}
}

func TestHangingAgentKilledWithChildren(t *testing.T) {
	p, state := testParams(t, "mode", "hang")
	a := newAgent(t, p)
	start := time.Now()
	err := a.Off(tctx(t, time.Second))
	elapsed := time.Since(start)
	if !errors.Is(err, agents.ErrOutcomeUnknown) {
		t.Fatalf("off of a hanging agent = %v, want outcome unknown", err)
	}
	var re *RunError
	if !errors.As(err, &re) || re.ExitCode != -1 || !strings.Contains(re.Reason, "killed with its process group") || !strings.Contains(re.Stderr(), "hanging") {
		t.Fatalf("error = %#v", err)
	}
	if elapsed > 10*time.Second {
		t.Fatalf("off returned after %s: not killed at the 1s deadline", elapsed)
	}
	t.Logf("off returned after %s", elapsed)
	child, err := strconv.Atoi(readFile(t, state+".child"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); ; {
		if !alive(child) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's child %d survived the timeout", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Without a caller deadline, agent_timeout applies.
	p["agent_timeout"] = "0.5"
	b := newAgent(t, p)
	if _, err := b.Status(context.Background()); !errors.Is(err, agents.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("status with agent_timeout = %v", err)
	}
}

func TestGarbageAndOddExitCodes(t *testing.T) {
	p, _ := testParams(t, "mode", "garbage")
	a := newAgent(t, p)
	if st, err := a.Status(tctx(t, 30*time.Second)); err == nil || st != agents.StateUnknown || !strings.Contains(err.Error(), "unrecognized output") {
		t.Fatalf("status with garbage output = %v, %v", st, err)
	}
	if err := a.Off(tctx(t, 30*time.Second)); !errors.Is(err, agents.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "unrecognized output") {
		t.Fatalf("off with garbage output = %v", err)
	}
	if _, err := a.List(tctx(t, 30*time.Second)); err == nil {
		t.Fatal("list with garbage output succeeded")
	}

	p, _ = testParams(t, "mode", "exit7")
	b := newAgent(t, p)
	st, err := b.Status(tctx(t, 30*time.Second))
	var re *RunError
	if err == nil || st != agents.StateUnknown || !errors.As(err, &re) || re.ExitCode != 7 || !strings.Contains(err.Error(), "unexpected exit status 7") {
		t.Fatalf("status exit 7 = %v, %v", st, err)
	}
	if err := b.Off(tctx(t, 30*time.Second)); err == nil || !strings.Contains(err.Error(), "exit status 7") {
		t.Fatalf("off exit 7 = %v", err)
	}
}

func TestAgentThatLiesAboutOff(t *testing.T) {
	p, state := testParams(t, "mode", "lie", "readback_timeout", "0.6")
	a := newAgent(t, p)
	err := a.Off(tctx(t, 30*time.Second))
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "reads back on, not off") {
		t.Fatalf("off of a lying agent = %v", err)
	}
	if s := readFile(t, state); s != "on" {
		t.Fatalf("state %q", s)
	}
}

func TestWrongPasswordFailsScrubbed(t *testing.T) {
	p, _ := testParams(t)
	p["password_file"] = secretFile(t, "hunter2-wrong")
	a := newAgent(t, p)
	err := a.Off(tctx(t, 30*time.Second))
	if !errors.Is(err, agents.ErrFailed) {
		t.Fatalf("off with wrong password = %v, want failed (nothing sent)", err)
	}
	var re *RunError
	if !errors.As(err, &re) || !strings.Contains(re.Stderr(), "password ***** refused") {
		t.Fatalf("stderr not kept: %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(re.Stderr(), "hunter2") || strings.Contains(a.LastStderr(), "hunter2") {
		t.Fatalf("password leaked: %v", err)
	}
	// Through an interface, as the engine may look for it.
	var withStderr interface{ Stderr() string }
	if !errors.As(err, &withStderr) || withStderr.Stderr() == "" {
		t.Fatal("no Stderr() in the error chain")
	}
}

func TestConfigValidationAgainstMetadata(t *testing.T) {
	agent := testdata(t, "fence_testagent")
	cases := []struct {
		p    agents.Params
		want string
	}{
		{agents.Params{"agent": agent, "ip": "x", "plug": "1"}, "parameter state_file: required by fence_testagent"},
		{agents.Params{"agent": agent, "plug": "1", "state_file": "/tmp/x"}, "parameter ip: required by fence_testagent"},
		{agents.Params{"agent": agent, "ip": "x", "state_file": "/tmp/x"}, "parameter plug: required by fence_testagent"},
		{agents.Params{"agent": agent, "ip": "x", "plug": "1", "state_file": "/tmp/x", "bogus": "1"}, "parameter bogus: unknown to fence_testagent"},
		{agents.Params{"agent": agent, "ip": "x", "plug": "1", "state_file": "/tmp/x", "mode": "ok\nip=evil"}, "parameter mode: value contains a line break"},
		{agents.Params{"agent": agent, "ip": "x", "plug": "1", "state_file": "/tmp/x", "password_file": "/nonexistent/pw"}, "parameter password_file"},
		{agents.Params{"agent": agent, "ip": "x", "plug": "1", "state_file": "/tmp/x", "agent_timeout": "soon"}, "parameter agent_timeout"},
		{agents.Params{"agent": "fence_nonexistent_xyz", "plugin_dir": testdata(t, "")}, "not found"},
		{agents.Params{"agent": "testdata/fence_testagent"}, "must be absolute"},
		{agents.Params{"agent": "../fence_testagent"}, "must be absolute"},
		{agents.Params{"agent": testdata(t, "fence_badmeta")}, "parse agent metadata"},
		{agents.Params{}, "parameter agent: required"},
	}
	for _, c := range cases {
		_, err := New(c.p, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%v) = %v; want error containing %q", c.p, err, c.want)
		}
	}
	// Deprecated names satisfy what replaced them; nodename is Pacemaker's.
	if _, err := New(agents.Params{"agent": agent, "ipaddr": "x", "port": "1", "state_file": "/tmp/x", "nodename": "n1"}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestScrubLongestFirst(t *testing.T) {
	got := scrub("pw=abcdef and abc", []string{"abc", "abcdef", ""})
	if got != "pw=***** and *****" {
		t.Fatalf("scrub = %q", got)
	}
}

// alive reports whether pid runs: a zombie waiting for a reaper is dead.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func TestStatusOutput(t *testing.T) {
	for _, c := range []struct {
		out  string
		said agents.State
		bad  string
	}{
		{"", agents.StateUnknown, ""},
		{"Status: ON\n", agents.StateOn, ""},
		{"\nstatus:off\r\n", agents.StateOff, ""},
		{"Status: ON\nStatus: OFF\n", agents.StateUnknown, "Status: OFF"},
		{"Status: MAYBE", agents.StateUnknown, "Status: MAYBE"},
		{"hello\n", agents.StateUnknown, "hello"},
	} {
		said, bad := statusOutput(c.out)
		if said != c.said || bad != c.bad {
			t.Errorf("statusOutput(%q) = %v, %q; want %v, %q", c.out, said, bad, c.said, c.bad)
		}
	}
}

func FuzzOutputParsers(f *testing.F) {
	f.Add("Status: ON\n")
	f.Add("1,node1\n2,node2\n")
	f.Add("Status: MAYBE\x01\xff\n")
	f.Fuzz(func(t *testing.T, out string) {
		said, bad := statusOutput(out)
		if bad == "" && said == agents.StateUnknown && strings.TrimSpace(out) != "" {
			t.Fatalf("non-empty output %q accepted without a state", out)
		}
		_ = garbage(out)
		_ = scrub(out, []string{"x", out})
	})
}

func TestSecretNames(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "passwd": true, "snmp_priv_passwd": true, "community": true, "hexadecimal_kg": true,
		"api_key": true, "token": true, "ip": false, "username": false, "plug": false, "snmp_priv_prot": false, "lanplus": false,
	} {
		if got := secretName.MatchString(name); got != want {
			t.Errorf("secretName(%s) = %v, want %v", name, got, want)
		}
	}
}
