package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/quorum"
)

func (d *Daemon) adminRoutes(mux *http.ServeMux) {
	post := func(method string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body) // read and bounded by readBody
			req, err := api.DecodeAdminRequest(body)
			if err != nil {
				writeError(w, http.StatusBadRequest, api.CodeBadRequest, err)
				return
			}
			// Who asked is what the kernel says, not what the client claims.
			req.RequestedBy = "fencectl@" + d.self
			if u := peerUser(r.Context()); u != "" {
				req.RequestedBy = api.CleanText(u) + "@" + d.self
			}
			ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
			defer cancel()
			out, err := d.admin(ctx, method, req)
			if err != nil {
				status, code := adminErrorStatus(err)
				writeError(w, status, code, err)
				return
			}
			writeAdminReply(w, method, out)
		}
	}
	mux.HandleFunc("POST /v1/fence", post(fwdFence))
	mux.HandleFunc("POST /v1/unfence", post(fwdUnfence))
	mux.HandleFunc("POST /v1/confirm", post(fwdConfirm))
	mux.HandleFunc("POST /v1/standby", post(fwdStandby))
	mux.HandleFunc("POST /v1/transfer", post(fwdTransfer))
	mux.HandleFunc("GET /v1/devices", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.DeviceList{SchemaVersion: SchemaVersion, Devices: d.devices()})
	})
	mux.HandleFunc("GET /v1/devices/{name}/status", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		dev, ok := d.config().Devices[name]
		if !ok {
			writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Errorf("unknown device %q", name))
			return
		}
		writeJSON(w, http.StatusOK, d.deviceStatus(r.Context(), name, dev.Agent))
	})
}

// writeAdminReply writes the leader's answer: a stonith record for fence,
// unfence and confirm, as it is; for standby and transfer a typed reply
// with the schema version (the leader may run an older fenced whose
// answer lacks it).
func writeAdminReply(w http.ResponseWriter, method string, out []byte) {
	var typed any
	switch method {
	case fwdStandby:
		var r api.StandbyReply
		if json.Unmarshal(out, &r) == nil {
			r.SchemaVersion, typed = SchemaVersion, r
		}
	case fwdTransfer:
		var r api.TransferReply
		if json.Unmarshal(out, &r) == nil {
			r.SchemaVersion, typed = SchemaVersion, r
		}
	}
	if typed != nil {
		writeJSON(w, http.StatusOK, typed)
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(apiWriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// adminErrorStatus is the status and code of a failed admin request. A
// refusal is the same answer whichever node was asked: one made by the
// leader keeps its kind on the way back (quorum.RemoteError).
func adminErrorStatus(err error) (int, string) {
	var ue *userError
	var re *quorum.RemoteError
	if errors.As(err, &ue) || (errors.As(err, &re) && re.Kind == api.CodeRefused) {
		return http.StatusBadRequest, api.CodeRefused
	}
	return http.StatusServiceUnavailable, api.CodeFailed
}

// ErrorKind travels with the error when it is forwarded between nodes.
func (e *userError) ErrorKind() string { return api.CodeRefused }

func (d *Daemon) devices() []api.Device {
	out := []api.Device{}
	cfg := d.config()
	for name, dev := range cfg.Devices {
		dv := api.Device{Name: name, Agent: dev.Agent, Targets: []string{}, Health: d.deviceHealth(name)}
		for _, n := range cfg.Nodes {
			for li, l := range n.Fence {
				for _, ref := range l.Devices {
					if ref.Device == name {
						t := fmt.Sprintf("%s (level %d", n.Name, li+1)
						if ref.Plug != "" {
							t += ", plug " + ref.Plug
						}
						dv.Targets = append(dv.Targets, t+")")
					}
				}
			}
		}
		out = append(out, dv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// withoutDevice is err's text without the engine's "device NAME: " in
// front: the answer it goes into names the device already, and an admin
// should not read "device node2-bmc: device node2-bmc: ...".
func withoutDevice(err error, name string) string {
	return strings.TrimPrefix(err.Error(), "device "+name+": ")
}

// deviceStatus checks the device from this node: monitor, and the state of
// every node mapped on it. It changes nothing but the device's health.
func (d *Daemon) deviceStatus(ctx context.Context, name, agent string) api.DeviceStatus {
	ds := api.DeviceStatus{SchemaVersion: SchemaVersion, Device: name, Agent: agent, Monitor: "ok", Targets: []api.TargetStatus{}}
	monitored := false
	cfg := d.config()
	for _, n := range cfg.Nodes {
		for _, lvl := range topology(cfg, n.Name) {
			for _, t := range lvl.Devices {
				if t.Device != name {
					continue
				}
				if !monitored {
					monitored = true
					// An admin's check is a check like the monitor's: it
					// updates the device's health on this node.
					start := time.Now()
					err := d.fence.engine.Monitor(ctx, t)
					d.fence.health.Record(name, start, time.Since(start), err, false)
					if err != nil {
						ds.Monitor = strings.TrimPrefix(withoutDevice(err, name), "monitor: ")
					}
				}
				ts := api.TargetStatus{Node: n.Name, Plug: t.Plug}
				st, err := d.fence.engine.DeviceStatus(ctx, t)
				ts.State = st.String()
				if err != nil {
					ts.Error = withoutDevice(err, name)
					ts.State = agents.StateUnknown.String()
				}
				ds.Targets = append(ds.Targets, ts)
			}
		}
	}
	return ds
}
