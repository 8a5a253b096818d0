package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
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
