package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/api"
)

// fenceWarnings are the status lines for the nodes that have no working
// fence path, from the answering node's device checks:
// "node2: no working fence path: node2-bmc auth failed 3m ago; pdu-a ok".
// relative says how long ago (the table); without it, the lines do not
// change between polls (status --watch).
func fenceWarnings(st *api.Status, now time.Time, relative bool) []string {
	var out []string
	for _, p := range st.FencePaths {
		if p.State != api.PathFailing {
			continue
		}
		var devs []string
		for _, d := range p.Devices {
			devs = append(devs, deviceWord(d, now, relative))
		}
		out = append(out, fmt.Sprintf("%s: no working fence path: %s", cell(p.Node), strings.Join(devs, "; ")))
	}
	return out
}

// deviceWord is one device of a fence path: "node2-bmc auth failed 3m ago".
func deviceWord(d api.FencePathDevice, now time.Time, relative bool) string {
	w := cell(d.Device) + " "
	switch d.State {
	case api.HealthOK:
		return w + "ok"
	case api.HealthPending:
		return w + "not checked yet"
	case api.HealthUnmonitored:
		return w + "not checked from this node"
	case api.HealthFailing:
		switch d.ErrorKind {
		case "auth":
			w += "auth failed"
		case "unreachable":
			w += "unreachable"
		default:
			w += "failing"
		}
		if relative && d.Since != nil {
			w += " " + shortAgo(now.Sub(*d.Since)) + " ago"
		}
		return w
	}
	return w + cell(d.State)
}

// shortAgo rounds d the way a person says it: 12s, 3m, 5h, 2d.
func shortAgo(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int(d/time.Second), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// pathCell is a node's FENCE column in the status table.
func pathCell(st *api.Status, node string) string {
	for _, p := range st.FencePaths {
		if p.Node == node {
			switch p.State {
			case api.PathFailing:
				return "NONE WORKING"
			case api.PathUnknown:
				for _, d := range p.Devices {
					if d.State != api.HealthUnmonitored {
						return "unknown"
					}
				}
				// The answering node's own path: the others check it.
				return "not checked here"
			}
			return cell(p.State)
		}
	}
	return "-"
}

// healthCells are a device's HEALTH, CHECKED, LATENCY and ERROR columns;
// HEALTH says whether this node holds a session open on it, ERROR what a
// passing check noted (a BMC without a free session slot).
func healthCells(h api.DeviceHealth, now time.Time) (state, checked, latency, errText string) {
	state, checked, latency, errText = cell(h.State), "-", "-", "-"
	switch h.State {
	case api.HealthFailing:
		state = "FAILING"
		if h.ErrorKind != "" {
			state += " (" + cell(h.ErrorKind) + ")"
		}
		if h.Since != nil {
			state += " for " + shortAgo(now.Sub(*h.Since))
		}
	case api.HealthUnmonitored:
		state = "not checked here"
	}
	switch h.Session {
	case "held":
		state += " (session held)"
	case "opening":
		state += " (opening session)"
	}
	if h.LastCheck != nil {
		checked = shortAgo(now.Sub(*h.LastCheck)) + " ago"
		latency = (time.Duration(h.LatencyMillis * float64(time.Millisecond))).Round(time.Millisecond).String()
	}
	if h.CheckingSince != nil && now.Sub(*h.CheckingSince) >= time.Second {
		checked += fmt.Sprintf(" (checking for %s)", shortAgo(now.Sub(*h.CheckingSince)))
	}
	if h.Error != "" {
		errText = api.EscapeText(h.Error)
	} else if h.Note != "" {
		errText = api.EscapeText(h.Note)
	}
	return
}
