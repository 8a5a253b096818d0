package resource

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/fenced/fenced/daemon/config"
)

// The registry knows every kind the configuration accepts, and no other.
func TestKindsCoverConfig(t *testing.T) {
	accepted := config.ResourceKinds()
	for _, name := range accepted {
		k, ok := lookupKind(name)
		if !ok {
			t.Errorf("config accepts resources of kind %q; none is registered here", name)
			continue
		}
		if k.name != name || k.build == nil || k.defaultInterval <= 0 {
			t.Errorf("kind %q: registered as %q, build set %v, default interval %s", name, k.name, k.build != nil, k.defaultInterval)
		}
	}
	for name := range kinds {
		if !slices.Contains(accepted, name) {
			t.Errorf("kind %q is registered but config does not accept it", name)
		}
	}
}

// A resource of each kind builds, with its kind, label and default
// monitor interval.
func TestKindsBuild(t *testing.T) {
	needAgent(t, dummy)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Resources = []config.Resource{
		{Name: "d", OCF: dummy, Params: map[string]string{"state": statePath(dir, "d")}},
		{Name: "m", Mount: &config.Mount{Device: "/dev/null", Mountpoint: dir + "/m", FSType: "xfs"}},
		{Name: "h", Hooks: &config.Hooks{Monitor: "/bin/true"}},
	}
	var given []string
	for _, r := range cfg.Resources {
		given = append(given, r.Kind())
	}
	if !slices.Equal(given, config.ResourceKinds()) {
		t.Fatalf("test resources are of kinds %v; config accepts %v: add one of each", given, config.ResourceKinds())
	}
	g, err := New(context.Background(), cfg, "node1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range g.Status() {
		got = append(got, s.Name+" "+s.Kind+" "+s.MonitorInterval.String())
	}
	// Dummy advises a 10s monitor interval.
	want := []string{"d ocf:" + dummy + " 10s", "m mount " + config.DefaultStorageMonitorInterval.String(), "h hooks " + config.DefaultStorageMonitorInterval.String()}
	if !slices.Equal(got, want) {
		t.Errorf("status %q, want %q", got, want)
	}
}

// A resource that gives no kind, or several, is refused by New with the
// message naming every kind, and Check and ValidateAll pass it over (the
// configuration's Validate reports it).
func TestUnknownKind(t *testing.T) {
	cfg := config.Default()
	cfg.Resources = []config.Resource{
		{Name: "none"},
		{Name: "two", OCF: dummy, Hooks: &config.Hooks{Monitor: "/bin/true"}},
	}
	_, err := New(context.Background(), cfg, "node1", nil)
	want := "resources[0] (none): give exactly one of ocf, mount, hooks\n" +
		"resources[1] (two): give exactly one of ocf, mount, hooks"
	if err == nil || err.Error() != want {
		t.Errorf("New: %v, want %q", err, want)
	}
	if _, ok := lookupKind(""); ok {
		t.Error(`lookupKind("") found a kind`)
	}
	if ps := Check(context.Background(), cfg); len(ps) > 0 {
		t.Errorf("Check: %v", ps)
	}
	if ps := ValidateAll(context.Background(), cfg, "node1"); len(ps) > 0 {
		t.Errorf("ValidateAll: %v", ps)
	}
}

// register refuses what would make the registry ambiguous or disagree with
// the configuration.
func TestRegisterRefuses(t *testing.T) {
	build := func(context.Context, *config.Config, config.Resource, string, *slog.Logger) (built, error) {
		return built{}, nil
	}
	for _, tc := range []struct {
		k    kind
		want string
	}{
		{kind{name: "ocf", build: build}, "duplicate kind ocf"},
		{kind{name: "systemd", build: build}, "kind systemd is not one config.ResourceKinds lists"},
		{kind{name: "", build: build}, "empty name or nil build"},
		{kind{name: "mount"}, "empty name or nil build"},
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tc.want) {
					t.Errorf("register(%q): panic %v, want %q", tc.k.name, r, tc.want)
				}
			}()
			register(tc.k)
		}()
	}
}
