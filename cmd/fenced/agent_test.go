package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

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
