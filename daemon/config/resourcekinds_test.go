package config

import (
	"slices"
	"testing"
)

// kindSamples are a resource of each kind; TestResourceKinds checks that
// every kind has one, so a kind added to resourceKinds is tested here too.
var kindSamples = map[string]Resource{
	"ocf":   {Name: "ip", OCF: "heartbeat:IPaddr2", Params: map[string]string{"ip": "10.0.0.1"}},
	"mount": {Name: "data", Mount: &Mount{Device: "/dev/sdb", Mountpoint: "/srv/data", FSType: "xfs"}},
	"hooks": {Name: "app", Hooks: &Hooks{Start: "/usr/bin/start", Stop: "/usr/bin/stop"}},
}

// Each kind is given by its own key, and a resource giving none or several
// has no kind.
func TestResourceKinds(t *testing.T) {
	names := ResourceKinds()
	if want := []string{"ocf", "mount", "hooks"}; !slices.Equal(names, want) {
		t.Errorf("ResourceKinds() = %v, want %v", names, want)
	}
	for _, name := range names {
		r, ok := kindSamples[name]
		if !ok {
			t.Errorf("no sample resource of kind %q", name)
			continue
		}
		if got := r.Kind(); got != name {
			t.Errorf("%s sample: Kind() = %q", name, got)
		}
	}
	if len(kindSamples) != len(names) {
		t.Errorf("%d samples for %d kinds", len(kindSamples), len(names))
	}
	several := kindSamples["ocf"]
	several.Mount = kindSamples["mount"].Mount
	for _, r := range []Resource{{Name: "none"}, several} {
		if got := r.Kind(); got != "" {
			t.Errorf("%s: Kind() = %q, want \"\"", r.Name, got)
		}
	}
}

// A resource of each kind validates; one giving no kind, or several, is
// refused with the message naming every kind, and params are refused on a
// kind that takes none.
func TestResourceKindValidation(t *testing.T) {
	cases := []validationCase{}
	for _, name := range ResourceKinds() {
		r := kindSamples[name]
		cases = append(cases, validationCase{name, func(c *Config) { c.Resources = []Resource{r} }, ""})
	}
	const exactlyOne = "resources[0]: give exactly one of ocf (an OCF agent PROVIDER:TYPE), mount or hooks"
	several := kindSamples["mount"]
	several.Hooks = kindSamples["hooks"].Hooks
	withParams := kindSamples["hooks"]
	withParams.NodeParams = map[string]string{"nic": "eth0"}
	cases = append(cases,
		validationCase{"no kind", func(c *Config) { c.Resources = []Resource{{Name: "x"}} }, exactlyOne},
		validationCase{"several kinds", func(c *Config) { c.Resources = []Resource{several} }, exactlyOne},
		validationCase{"params on hooks", func(c *Config) { c.Resources = []Resource{withParams} },
			"resources[0].node_params: node_params are passed to OCF agents only"},
	)
	checkValidation(t, cases)
}

// storage.checks_tokens covers the kinds run through package storage and
// no other.
func TestResourceKindTokens(t *testing.T) {
	c := &Config{Storage: Storage{ChecksTokens: true}}
	for _, name := range ResourceKinds() {
		c.Resources = append(c.Resources, kindSamples[name])
	}
	if got, want := c.Unchecked(), []string{"ip"}; !slices.Equal(got, want) {
		t.Errorf("Unchecked() = %v, want %v", got, want)
	}
	if storage, unchecked := c.TokenChecks(); !storage || !unchecked {
		t.Errorf("TokenChecks() = %v, %v, want true, true", storage, unchecked)
	}
	c.Storage.ChecksTokens = false
	if got := c.Unchecked(); len(got) != 3 {
		t.Errorf("without storage.checks_tokens: Unchecked() = %v, want all three", got)
	}
}

// A hooks resource lists its programs for the check on the node; the
// other kinds run none of their own.
func TestResourceExecutables(t *testing.T) {
	got := kindSamples["hooks"].Executables("resources[1]")
	want := []Executable{{"resources[1].hooks.start", "/usr/bin/start"}, {"resources[1].hooks.stop", "/usr/bin/stop"}, {"resources[1].hooks.monitor", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("hooks: Executables = %v, want %v", got, want)
	}
	for _, name := range []string{"ocf", "mount"} {
		if got := kindSamples[name].Executables("resources[0]"); len(got) != 0 {
			t.Errorf("%s: Executables = %v, want none", name, got)
		}
	}
}
