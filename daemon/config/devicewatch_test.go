package config

import (
	"strings"
	"testing"
	"time"
)

func TestDeviceWatchKeys(t *testing.T) {
	cases := []struct {
		name string
		dev  Device
		want string
	}{
		{"monitor default", Device{Agent: "ipmi"}, ""},
		{"monitor at the minimum", Device{Agent: "ipmi", MonitorInterval: Duration(MinDeviceMonitorInterval)}, ""},
		{"monitor at the maximum", Device{Agent: "ipmi", MonitorInterval: Duration(MaxDeviceMonitorInterval)}, ""},
		{"monitor every millisecond", Device{Agent: "ipmi", MonitorInterval: Duration(time.Millisecond)}, "devices.bmc.monitor_interval: 1ms: want 0 (1m0s) or 1s to 24h0m0s"},
		{"monitor negative", Device{Agent: "ipmi", MonitorInterval: -1}, "devices.bmc.monitor_interval: -1ns"},
		{"monitor every year", Device{Agent: "ipmi", MonitorInterval: Duration(365 * 24 * time.Hour)}, "devices.bmc.monitor_interval: 8760h0m0s"},
		{"unfence on_start", Device{Agent: "ipmi", Unfence: UnfenceOnStart}, ""},
		{"unfence never", Device{Agent: "ipmi", Unfence: UnfenceNever}, ""},
		{"unfence typo", Device{Agent: "ipmi", Unfence: "onstart"}, `devices.bmc.unfence: "onstart": want on_start, never, or nothing`},
	}
	var vcs []validationCase
	for _, tc := range cases {
		dev := tc.dev
		vcs = append(vcs, validationCase{tc.name, func(c *Config) { c.Devices = map[string]Device{"bmc": dev} }, tc.want})
	}
	checkValidation(t, vcs)
	if got := (Device{}).DeviceMonitorInterval(); got != DefaultDeviceMonitorInterval {
		t.Errorf("default interval %v", got)
	}
	if got := (Device{MonitorInterval: Duration(5 * time.Second)}).DeviceMonitorInterval(); got != 5*time.Second {
		t.Errorf("interval %v", got)
	}
}

// The keys decode from YAML with their line numbers, like every other.
func TestDeviceWatchKeysFromFile(t *testing.T) {
	src := `version: 1
cluster: {name: c}
gossip: {plaintext: true}
nodes:
  - {name: a, gossip: "127.0.0.1:1", raft: "127.0.0.1:2", fence: [{devices: [{device: d}]}]}
devices:
  d:
    agent: ipmi
    monitor_interval: 10ms
    unfence: sometimes
`
	c, err := Parse([]byte(src), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := c.Validate(nil).Error()
	for _, want := range []string{"x.yaml:9: devices.d.monitor_interval: 10ms", `x.yaml:10: devices.d.unfence: "sometimes"`} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in:\n%s", want, got)
		}
	}
}
