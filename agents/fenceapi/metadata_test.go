package fenceapi

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// fence_ipmilan.xml is the metadata Debian's fence-agents 4.12.1 prints.
func TestParseMetadataFenceIpmilan(t *testing.T) {
	f, err := os.Open("testdata/fence_ipmilan.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := ParseMetadata(f)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "fence_ipmilan" {
		t.Errorf("name = %q", m.Name)
	}
	ip, ok := m.Parameter("ip")
	if !ok || ip.Obsoletes != "ipaddr" || ip.Description() != "IP address or hostname of fencing device" {
		t.Errorf("ip parameter = %+v, %v", ip, ok)
	}
	port, _ := m.Parameter("ipport")
	if port.Content.Type != "integer" || port.Content.Default != "623" {
		t.Errorf("ipport content = %+v", port.Content)
	}
	auth, _ := m.Parameter("auth")
	if len(auth.Content.Options) != 3 {
		t.Errorf("auth options = %+v", auth.Content.Options)
	}
	if a, _ := m.Parameter("action"); !a.IsRequired() {
		t.Error("action not required")
	}
	for _, a := range []string{"on", "off", "reboot", "status", "monitor", "metadata", "validate-all"} {
		if !m.HasAction(a) {
			t.Errorf("action %s missing", a)
		}
	}
	if len(m.Symlinks) == 0 {
		t.Error("no symlinks parsed")
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	in := &Metadata{
		Name: "fence_x", ShortDesc: "X",
		Parameters: []Parameter{{Name: "ip", Required: "1", Content: Content{Type: "string"}, ShortDesc: []LangText{{Lang: "en", Text: "address & <port>"}}}},
		Actions:    []Action{{Name: "off"}, {Name: "on", Automatic: "0"}},
	}
	var buf bytes.Buffer
	if _, err := in.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	out, err := ParseMetadata(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := out.Parameter("ip"); !p.IsRequired() || p.Description() != "address & <port>" {
		t.Errorf("round trip ip = %+v", p)
	}
	if !out.HasAction("on") || out.Actions[1].Automatic != "0" {
		t.Errorf("round trip actions = %+v", out.Actions)
	}
}

func TestParseMetadataErrors(t *testing.T) {
	for _, doc := range []string{"", "<resource-agent>", "<resource-agent/>", `<resource-agent name="x"><parameters><parameter/></parameters></resource-agent>`, "not xml"} {
		if _, err := ParseMetadata(strings.NewReader(doc)); err == nil {
			t.Errorf("ParseMetadata(%q) succeeded", doc)
		}
	}
}

func FuzzParseMetadata(f *testing.F) {
	b, _ := os.ReadFile("testdata/fence_ipmilan.xml")
	f.Add(string(b))
	f.Add(`<resource-agent name="a"><actions><action name="off"/></actions></resource-agent>`)
	f.Fuzz(func(t *testing.T, doc string) {
		_, _ = ParseMetadata(strings.NewReader(doc))
	})
}
