package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
)

// `fenced agent ipmi` exits 2 for a powered-off target and 0 for an
// accepted metadata request, through the real command tree.
func TestAgentCommandExitCodes(t *testing.T) {
	bmc, err := ipmisim.StartBMC(ipmisim.BMCConfig{PoweredOn: false})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Close()
	stdin := fmt.Sprintf("action=status\nip=%s\nipport=%d\nusername=admin\npassword=password\n", bmc.Host(), bmc.Port())
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"agent", "ipmi"}, strings.NewReader(stdin), &out, &errOut)
	if code != 2 || !strings.Contains(out.String(), "Status: OFF") {
		t.Fatalf("status of an off node: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := Run(context.Background(), []string{"agent", "ipmi", "-o", "metadata"}, strings.NewReader(""), &out, &errOut); code != 0 || !strings.Contains(out.String(), "<resource-agent") {
		t.Fatalf("metadata: exit %d", code)
	}
	out.Reset()
	if code := Run(context.Background(), []string{"agent"}, strings.NewReader(""), &out, &errOut); code != 0 || !strings.Contains(out.String(), "ipmi") {
		t.Fatalf("agent list: exit %d, %q", code, out.String())
	}
}

// fence-agents' own RelaxNG schema for agent metadata (Debian fence-agents).
const metadataSchema = "/usr/share/cluster/relaxng/metadata.rng"

// xmllintRelaxNG validates doc against the schema with libxml2's xmllint
// and returns its complaint, or "" when the document is valid.
func xmllintRelaxNG(t *testing.T, doc []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "metadata.xml")
	if err := os.WriteFile(f, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("xmllint", "--noout", "--relaxng", metadataSchema, f).CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("xmllint: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	return ""
}

// Every built-in agent's metadata, as `fenced agent NAME -o metadata`
// prints it, passes fence-agents' own schema, which Pacemaker's tools
// expect agents to follow. A document without <vendor-url> fails it, so
// the check can fail.
func TestAgentMetadataPassesFenceAgentsSchema(t *testing.T) {
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Fatal("xmllint (Debian libxml2-utils) is missing: run .ci/install-deps")
	}
	if _, err := os.Stat(metadataSchema); err != nil {
		t.Fatalf("%v: install Debian's fence-agents (.ci/install-deps)", err)
	}
	names := agents.Default.Names()
	for _, want := range []string{"exec", "ipmi", "pdu", "redfish", "san"} {
		if !slices.Contains(names, want) {
			t.Fatalf("agent %s not registered (have %v)", want, names)
		}
	}
	for _, name := range names {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), []string{"agent", name, "-o", "metadata"}, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("%s: metadata: exit %d: %s", name, code, errOut.String())
		}
		if msg := xmllintRelaxNG(t, out.Bytes()); msg != "" {
			t.Errorf("%s: metadata fails %s:\n%s", name, metadataSchema, msg)
		}
		if name == "ipmi" {
			broken := regexp.MustCompile(`(?s)\s*<vendor-url>.*?</vendor-url>`).ReplaceAll(out.Bytes(), nil)
			if xmllintRelaxNG(t, broken) == "" {
				t.Fatal("metadata without <vendor-url> passes the schema: the check checks nothing")
			}
		}
	}
	// The reference: what Debian's fence_ipmilan prints passes too.
	ref, err := exec.Command("fence_ipmilan", "-o", "metadata").Output()
	if err != nil {
		t.Fatalf("fence_ipmilan -o metadata: %v", err)
	}
	if msg := xmllintRelaxNG(t, ref); msg != "" {
		t.Fatalf("fence_ipmilan's own metadata fails: %s", msg)
	}
}

// runAgentCmd runs `fenced agent ARGS...` through the real command tree.
func runAgentCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Run(ctx, append([]string{"agent"}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func requirePrograms(t *testing.T, names ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Debian's fence-agents against simulators")
	}
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("%s missing (Debian fence-agents / openipmi): run .ci/install-deps", n)
		}
	}
}

func secretFile(t *testing.T, v string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte(v+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// step is one `fenced agent exec` run and what it must do.
type step struct {
	action string
	code   int
	out    string
	check  func() error
}

func runSteps(t *testing.T, secret string, stdin func(action string) string, steps []step) {
	t.Helper()
	for _, s := range steps {
		code, out, errOut := runAgentCmd(t, stdin(s.action), "exec")
		if code != s.code || !strings.Contains(out, s.out) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", s.action, code, out, errOut, s.code, s.out)
		}
		if strings.Contains(out+errOut, secret) {
			t.Fatalf("%s: the password is in the output", s.action)
		}
		if strings.Contains(errOut, "ignoring parameter") && !strings.Contains(errOut, "ignoring parameter community:") {
			t.Fatalf("%s: a parameter of the program was dropped: %s", s.action, errOut)
		}
		if s.check != nil {
			if err := s.check(); err != nil {
				t.Fatalf("%s: exit %d but %v", s.action, code, err)
			}
		}
	}
}

// `fenced agent exec` on its own takes the wrapped program's parameters
// (its metadata declares them), on stdin and as options: Debian's
// fence_redfish against the Redfish simulator over verified HTTPS.
func TestAgentExecFenceRedfish(t *testing.T) {
	requirePrograms(t, "fence_redfish")
	const pw = "rf-exec-Secret-9"
	srv, err := redfishsim.Start("", true, redfishsim.Options{Profile: redfishsim.ProfileIDRAC,
		Users: []redfishsim.User{{Name: "root", Password: pw}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CACertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REQUESTS_CA_BUNDLE", ca) // fence_redfish verifies the BMC with it
	host, port, _ := strings.Cut(srv.Addr, ":")
	stdin := func(action string) string {
		// community is not fence_redfish's: ignored with a warning, as
		// fence-agents do; everything else is the program's.
		return fmt.Sprintf("action=%s\nagent=fence_redfish\nip=%s\nipport=%s\nusername=root\npassword=%s\nnodename=node1\nshell_timeout=5\ncommunity=x\n", action, host, port, pw)
	}
	power := func(want string) func() error {
		return func() error {
			if got := srv.PowerState(""); got != want {
				return fmt.Errorf("the BMC reads %s, want %s", got, want)
			}
			return nil
		}
	}
	runSteps(t, pw, stdin, []step{
		{"status", 0, "Status: ON", power("On")},
		{"off", 0, "Success: Powered OFF", power("Off")},
		{"status", 2, "Status: OFF", nil},
		{"on", 0, "Success: Powered ON", power("On")},
		{"monitor", 0, "", nil},
	})
	_, _, errOut := runAgentCmd(t, stdin("status"), "exec")
	if !strings.Contains(errOut, "ignoring parameter community:") {
		t.Fatalf("no warning for a parameter fence_redfish does not take: %q", errOut)
	}
	// Options: --ip and the rest are the program's; the secret from a file.
	code, out, errOut := runAgentCmd(t, "", "exec", "--agent=fence_redfish", "--ip="+host, "--ipport", port,
		"-l", "root", "--password-file="+secretFile(t, pw), "--ssl", "-o", "status")
	if code != 0 || !strings.Contains(out, "Status: ON") {
		t.Fatalf("with options: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runAgentCmd(t, "", "exec", "--agent=fence_redfish", "--ip="+host, "--snmp-version=2c", "-o", "status"); code != 1 || !strings.Contains(errOut, "--snmp-version: unknown") {
		t.Fatalf("an option fence_redfish does not take: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runAgentCmd(t, "", "exec", "--ip="+host, "-o", "status"); code != 1 || !strings.Contains(errOut, "parameter agent: required") {
		t.Fatalf("no --agent: exit %d, %q", code, errOut)
	}
}

// The same with Debian's fence_ipmilan against OpenIPMI's ipmi_sim (cipher
// 3): off really ends the host process; reboot is off, confirmed, then
// on; method=cycle is refused with its reason before anything is sent.
func TestAgentExecFenceIpmilan(t *testing.T) {
	requirePrograms(t, "fence_ipmilan", "ipmi_sim")
	const pw = "ipmi-exec-Pw-4"
	sim, err := ipmisim.StartOpenIPMI(context.Background(), ipmisim.OpenIPMIConfig{Dir: t.TempDir(), Name: "agentexec",
		Password: pw, KillWait: time.Second, PowerOffWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	base := fmt.Sprintf("agent=fence_ipmilan\nip=%s\nipport=%d\nusername=admin\npassword=%s\nlanplus=1\ncipher=3\npower_wait=0\nnodename=node1\n", sim.Host, sim.Port, pw)
	stdin := func(action string) string { return "action=" + action + "\n" + base }
	host := func(running bool) func() error {
		return func() error {
			deadline := time.Now().Add(5 * time.Second)
			for sim.HostRunning() != running {
				if time.Now().After(deadline) {
					return fmt.Errorf("host process running=%v", sim.HostRunning())
				}
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}
	}
	runSteps(t, pw, stdin, []step{
		{"status", 0, "Status: ON", host(true)},
		{"off", 0, "Success: Powered OFF", func() error {
			if sim.HostRunning() {
				return errors.New("off confirmed while the host process still runs")
			}
			return nil
		}},
		{"status", 2, "Status: OFF", nil},
		{"on", 0, "Success: Powered ON", host(true)},
		{"reboot", 0, "Success: Rebooted", host(true)},
	})
	code, out, errOut := runAgentCmd(t, stdin("reboot")+"method=cycle\n", "exec")
	if code != 1 || strings.Contains(out, "Success") || !strings.Contains(errOut, "parameter method: cycle is refused") {
		t.Fatalf("method=cycle: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if !sim.HostRunning() {
		t.Fatal("method=cycle was refused but the host was power-cycled or left off")
	}
	// Options, as fence_ipmilan takes them.
	code, out, errOut = runAgentCmd(t, "", "exec", "--agent", "fence_ipmilan", "-a", sim.Host, "--ipport="+strconv.Itoa(sim.Port),
		"-l", "admin", "--password-file="+secretFile(t, pw), "-P", "-C", "3", "-o", "status")
	if code != 0 || !strings.Contains(out, "Status: ON") {
		t.Fatalf("with options: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
