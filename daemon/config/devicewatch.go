package config

import "time"

// Bounds and default of devices.NAME.monitor_interval. A check opens a
// session on the device (a BMC has only a few): once a second from every
// node is the most a device should see; once a day is the least that still
// finds an expired password before it matters.
const (
	DefaultDeviceMonitorInterval = 60 * time.Second
	MinDeviceMonitorInterval     = time.Second
	MaxDeviceMonitorInterval     = 24 * time.Hour
)

// Values of devices.NAME.unfence.
const (
	UnfenceAuto    = ""         // as the agent declares (FenceAgentAPI on_target + automatic)
	UnfenceOnStart = "on_start" // always, at this node's start
	UnfenceNever   = "never"
)

// DeviceMonitorInterval is how often the device is checked.
func (d Device) DeviceMonitorInterval() time.Duration {
	if d.MonitorInterval == 0 {
		return DefaultDeviceMonitorInterval
	}
	return d.MonitorInterval.D()
}

// deviceWatch checks a device's monitor_interval and unfence keys.
func (v *validator) deviceWatch(path string, d Device) {
	if mi := d.MonitorInterval.D(); mi != 0 && (mi < MinDeviceMonitorInterval || mi > MaxDeviceMonitorInterval) {
		v.add(path+".monitor_interval", "%s: want 0 (%s) or %s to %s", mi, DefaultDeviceMonitorInterval, MinDeviceMonitorInterval, MaxDeviceMonitorInterval)
	}
	switch d.Unfence {
	case UnfenceAuto, UnfenceOnStart, UnfenceNever:
	default:
		v.add(path+".unfence", "%q: want %s, %s, or nothing (as the agent's metadata says)", d.Unfence, UnfenceOnStart, UnfenceNever)
	}
}
