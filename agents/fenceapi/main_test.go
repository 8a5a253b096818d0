package fenceapi

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

func ipmiRegistry() *agents.Registry {
	reg := agents.NewRegistry()
	reg.Register(ipmi.Kind())
	return reg
}

func runMain(t *testing.T, reg *agents.Registry, name string, args []string, stdin string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Main(ctx, reg, name, args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// Acceptance 1 through the FenceAgentAPI: stdin parameters, exit codes,
// and the host process really gone when off succeeds.
func TestIPMIThroughFenceAgentAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ipmi_sim")
	}
	sim, err := ipmisim.StartOpenIPMI(context.Background(), ipmisim.OpenIPMIConfig{Dir: t.TempDir(), KillWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	reg := ipmiRegistry()
	stdin := func(action string) string {
		return fmt.Sprintf("# fenced agent test\naction=%s\nip=%s\nipport=%d\nusername=admin\npassword=password\ncipher=3\nnodename=node1\n", action, sim.Host, sim.Port)
	}
	steps := []struct {
		action string
		code   int
		out    string
		check  func() bool
	}{
		{"status", ExitOK, "Status: ON", sim.HostRunning},
		{"off", ExitOK, "Success: Powered OFF", func() bool { return !sim.HostRunning() }},
		{"status", ExitOff, "Status: OFF", nil},
		{"on", ExitOK, "Success: Powered ON", nil},
		{"reboot", ExitOK, "Success: Rebooted", nil},
		{"monitor", ExitOK, "", nil},
		{"validate-all", ExitOK, "", nil},
		{"list", ExitFailure, "", nil},
	}
	for _, s := range steps {
		code, out, errOut := runMain(t, reg, "ipmi", nil, stdin(s.action))
		if code != s.code || !strings.Contains(out, s.out) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", s.action, code, out, errOut, s.code, s.out)
		}
		if s.check != nil && !s.check() {
			t.Fatalf("%s: exit %d but the host process is in the wrong state", s.action, code)
		}
		if strings.Contains(out+errOut, "password=") || strings.Contains(out+errOut, "=password") {
			t.Fatalf("%s: output shows the password", s.action)
		}
	}
	waitHost(t, sim)
	// The same with fence-agents style options; the secret comes from a file.
	code, out, errOut := runMain(t, reg, "ipmi", []string{"-o", "status", "--ip=" + sim.Host, "--ipport", strconv.Itoa(sim.Port), "-l", "admin", "--password-script=echo password", "-C", "3", "--lanplus"}, "")
	if code != ExitOK || !strings.Contains(out, "Status: ON") {
		t.Fatalf("status with options: exit %d %q %q", code, out, errOut)
	}
}

func waitHost(t *testing.T, sim *ipmisim.OpenIPMI) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !sim.HostRunning() {
		if time.Now().After(deadline) {
			t.Fatal("host not running after reboot")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Acceptance 4 through the API: an unreachable BMC is exit 1, outcome
// unknown, after the configured timeout; a wrong password says so.
func TestIPMIFailuresThroughFenceAgentAPI(t *testing.T) {
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	reg := ipmiRegistry()
	base := fmt.Sprintf("ip=%s\nipport=%d\nusername=admin\n", bmc.Host(), bmc.Port())

	code, _, errOut := runMain(t, reg, "ipmi", nil, base+"action=off\npassword=not-it\n")
	if code != ExitFailure || !strings.Contains(errOut, "authentication failed") || strings.Contains(errOut, "not-it") {
		t.Fatalf("wrong password: exit %d, stderr %q", code, errOut)
	}
	bmc.SetSilent(true)
	start := time.Now()
	code, _, errOut = runMain(t, reg, "ipmi", nil, base+"action=status\npassword=password\nlogin_timeout=1\ncommand_timeout=0.25\n")
	if code != ExitFailure || !strings.Contains(errOut, "Outcome unknown") {
		t.Fatalf("silent BMC: exit %d, stderr %q", code, errOut)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("silent BMC: gave up after %v, login_timeout 1s", d)
	}
	code, _, errOut = runMain(t, reg, "ipmi", nil, base+"action=status\npassword=password\ncipher=0\n")
	if code != ExitFailure || !strings.Contains(errOut, "allow_cipher0") {
		t.Fatalf("cipher 0: exit %d, stderr %q", code, errOut)
	}
}

// Acceptance 5: metadata is well-formed XML listing every parameter.
func TestIPMIMetadata(t *testing.T) {
	code, out, errOut := runMain(t, ipmiRegistry(), "ipmi", []string{"-o", "metadata"}, "")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// Well-formed: every token decodes.
	dec := xml.NewDecoder(strings.NewReader(out))
	for {
		if _, err := dec.Token(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("metadata is not well-formed XML: %v\n%s", err, out)
		}
	}
	m, err := ParseMetadata(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "fenced-ipmi" || !strings.Contains(out, "<resource-agent") || !strings.Contains(out, "<parameters>") || !strings.Contains(out, "<actions>") {
		t.Fatalf("metadata shape:\n%s", out)
	}
	k := ipmi.Kind()
	for _, p := range k.Params {
		mp, ok := m.Parameter(p.Name)
		if !ok {
			t.Errorf("parameter %s missing", p.Name)
			continue
		}
		if mp.IsRequired() != p.Required || mp.Content.Default != p.Default {
			t.Errorf("parameter %s = %+v", p.Name, mp)
		}
		for _, a := range p.Aliases {
			if ap, ok := m.Parameter(a); !ok || !ap.IsDeprecated() {
				t.Errorf("alias %s of %s missing or not deprecated", a, p.Name)
			}
		}
	}
	for _, name := range []string{"action", "plug", "port", "nodename"} {
		if _, ok := m.Parameter(name); !ok {
			t.Errorf("parameter %s missing", name)
		}
	}
	for _, a := range []string{"on", "off", "reboot", "status", "monitor", "list", "metadata", "validate-all"} {
		if !m.HasAction(a) {
			t.Errorf("action %s missing", a)
		}
	}
}

// Acceptance 5: validate-all rejects a missing ip with exit 1.
func TestValidateAll(t *testing.T) {
	reg := ipmiRegistry()
	code, _, errOut := runMain(t, reg, "ipmi", nil, "action=validate-all\nusername=admin\npassword=x\n")
	if code != ExitFailure || !strings.Contains(errOut, "parameter ip: required") {
		t.Fatalf("validate-all without ip: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runMain(t, reg, "ipmi", []string{"-o", "validate-all", "-a", "127.0.0.1"}, "")
	if code != ExitOK {
		t.Fatalf("validate-all with ip: exit %d, stderr %q", code, errOut)
	}
}

// fakeAgent drives the generic paths (list, plug resolution, exit codes)
// that the ipmi agent does not have.
type fakeAgent struct {
	p     agents.Params
	state agents.State
	err   error
}

func (f *fakeAgent) Off(context.Context) error    { f.state = agents.StateOff; return f.err }
func (f *fakeAgent) On(context.Context) error     { f.state = agents.StateOn; return f.err }
func (f *fakeAgent) Reboot(context.Context) error { return f.err }
func (f *fakeAgent) Status(context.Context) (agents.State, error) {
	return f.state, f.err
}
func (f *fakeAgent) List(context.Context) ([]agents.Port, error) {
	return []agents.Port{{ID: "1", Alias: "node1"}, {ID: "2"}}, nil
}

func TestGenericBehaviour(t *testing.T) {
	var last *fakeAgent
	reg := agents.NewRegistry()
	reg.Register(agents.Kind{Name: "fake", Description: "fake", Params: []agents.Param{{Name: "secret", Secret: true}, {Name: "fast", Type: "boolean"}, {Name: "fail"}},
		New: func(p agents.Params, _ *slog.Logger) (agents.Agent, error) {
			last = &fakeAgent{p: p, state: agents.StateUnknown}
			if p["fail"] == "unknown" {
				last.err = agents.Unknown("fake", errors.New("timeout"))
			}
			return last, nil
		}})
	code, out, _ := runMain(t, reg, "fake", nil, "action=list\n")
	if code != ExitOK || out != "1,node1\n2,\n" {
		t.Fatalf("list: %d %q", code, out)
	}
	runMain(t, reg, "fake", nil, "action=status\nport=7\nnodename=n1\n")
	if last.p["plug"] != "7" || last.p["action"] != "" {
		t.Fatalf("params given to the agent: %v", last.p)
	}
	runMain(t, reg, "fake", []string{"-o", "status", "-n", "n1", "--fast"}, "")
	if last.p["plug"] != "n1" || last.p["fast"] != "1" {
		t.Fatalf("params given to the agent: %v", last.p)
	}
	if code, out, _ := runMain(t, reg, "fake", nil, "action=status\n"); code != ExitFailure || !strings.Contains(out, "UNKNOWN") {
		t.Fatalf("unknown status: %d %q", code, out)
	}
	if code, _, errOut := runMain(t, reg, "fake", nil, "action=off\nfail=unknown\n"); code != ExitFailure || !strings.Contains(errOut, "Outcome unknown") {
		t.Fatalf("unknown off: %d %q", code, errOut)
	}
	if code, _, errOut := runMain(t, reg, "fake", []string{"--secret=hunter2"}, ""); code != ExitFailure || strings.Contains(errOut, "hunter2") || !strings.Contains(errOut, "command line") {
		t.Fatalf("secret on the command line: %d %q", code, errOut)
	}
	if code, _, _ := runMain(t, reg, "fake", []string{"-o", "dance"}, ""); code != ExitFailure {
		t.Fatalf("bad action: %d", code)
	}
	if code, _, _ := runMain(t, reg, "nope", nil, ""); code != ExitFailure {
		t.Fatalf("unknown agent: %d", code)
	}
	if code, _, _ := runMain(t, reg, "fake", nil, "action=on\n"); code != ExitOK || last.state != agents.StateOn {
		t.Fatalf("on (the default action is reboot; on must be explicit): %d", code)
	}
	// What a fencer like Pacemaker passes to every agent: options this one
	// does not take are ignored on stdin, with a warning that never shows
	// the value; on the command line they are an error.
	code, _, errOut := runMain(t, reg, "fake", nil, "action=on\nnodename=n1\nshell_timeout=20\nlogin_timeout=5\napi_token=Tok3n-value\n")
	if code != ExitOK || last.state != agents.StateOn {
		t.Fatalf("on with generic options: %d %q", code, errOut)
	}
	for _, n := range []string{"shell_timeout", "login_timeout", "api_token"} {
		if _, ok := last.p[n]; ok || !strings.Contains(errOut, "ignoring parameter "+n) {
			t.Fatalf("%s: passed to the agent (%v) or not warned about: %q", n, last.p, errOut)
		}
	}
	if strings.Contains(errOut, "Tok3n-value") || last.p["plug"] != "n1" {
		t.Fatalf("warning shows a value, or the target was dropped: %q %v", errOut, last.p)
	}
	if code, _, errOut := runMain(t, reg, "fake", []string{"-o", "on", "--shell-timeout=20"}, ""); code != ExitFailure {
		t.Fatalf("unknown option on the command line: %d %q", code, errOut)
	}
}

func TestParseParams(t *testing.T) {
	p, err := ParseParams(strings.NewReader("# c\n\n  ip = 10.0.0.1\npassword=a=b \r\nport=1\nport=2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p["ip"] != " 10.0.0.1" || p["password"] != "a=b" || p["port"] != "2" {
		t.Fatalf("parsed %q", p)
	}
	for _, in := range []string{"novalue\n", "=x\n", "bad name=1\n", "x=\x00\n", strings.Repeat("a", maxLineBytes+10)} {
		_, err := ParseParams(strings.NewReader(in))
		if err == nil {
			t.Errorf("ParseParams(%.20q) succeeded", in)
		}
	}
	_, err = ParseParams(strings.NewReader("secret-value-without-equals\n"))
	if err == nil || strings.Contains(err.Error(), "secret-value") {
		t.Fatalf("error echoes the line: %v", err)
	}
}

func FuzzParseParams(f *testing.F) {
	f.Add("action=off\nip=127.0.0.1\npassword=x=y\n")
	f.Add("# comment\n\n  name = value \r\n")
	f.Add("=\n")
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParseParams(strings.NewReader(in))
		if err != nil {
			return
		}
		for name, value := range p {
			if checkName(name) != nil {
				t.Fatalf("accepted bad name %q", name)
			}
			if strings.ContainsAny(value, "\n\x00") {
				t.Fatalf("value %q of %s spans lines or has NUL", value, name)
			}
		}
	})
}
