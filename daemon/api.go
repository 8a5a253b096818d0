package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// SchemaVersion of the JSON the API returns and `fencectl -o json` prints.
const SchemaVersion = 1

// listenAPI opens the control socket with mode 0660 (owner and group).
func listenAPI(path, group string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("api.socket %s: %w", path, err)
	}
	// A stale socket from a crashed daemon is removed only if nothing
	// answers on it; a live one means another fenced runs.
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("api.socket %s: another fenced is running", path)
	}
	os.Remove(path)
	old := syscall.Umask(0o117)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("api.socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api.socket %s: %w", path, err)
	}
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("api.group %s: %w", group, err)
		}
		gid, _ := strconv.Atoi(g.Gid)
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("api.socket %s: chown to group %s: %w", path, group, err)
		}
	}
	return ln, nil
}

// Status is GET /v1/status.
type Status struct {
	SchemaVersion int          `json:"schemaVersion"`
	Cluster       string       `json:"cluster"`
	Node          string       `json:"node"`
	Quorum        QuorumStatus `json:"quorum"`
	Primary       PrimaryInfo  `json:"primary"`
	Self          SelfStatus   `json:"self"`
	Nodes         []NodeStatus `json:"nodes"`
}

// QuorumStatus counts votes against the configured size.
type QuorumStatus struct {
	Configured int    `json:"configured"`
	Seen       int    `json:"votesSeen"`
	Needed     int    `json:"votesNeeded"`
	Have       bool   `json:"have"`
	Leader     string `json:"leader"`
}

// PrimaryInfo is the replicated holder state.
type PrimaryInfo struct {
	Node        string            `json:"node"`
	Epoch       uint64            `json:"epoch"`
	State       string            `json:"state"`
	Blocked     bool              `json:"blocked"`
	Reason      string            `json:"reason,omitempty"`
	Previous    string            `json:"previous,omitempty"`
	Unconfirmed map[string]uint64 `json:"unconfirmed,omitempty"`
}

// SelfStatus is this node's own view.
type SelfStatus struct {
	Role         string  `json:"role"`
	Acting       bool    `json:"acting"`
	Epoch        uint64  `json:"epoch"`
	KnownEpoch   uint64  `json:"knownEpoch"`
	LeaseLeftSec float64 `json:"leaseLeftSeconds"`
	Storage      string  `json:"storage"`
	Raft         string  `json:"raft"`
	Term         uint64  `json:"raftTerm"`
	Standby      bool    `json:"standby"`
}

// NodeStatus is one configured node.
type NodeStatus struct {
	Name        string     `json:"name"`
	Address     string     `json:"address"`
	Gossip      string     `json:"gossip"`
	Raft        string     `json:"raftRole"`
	Role        string     `json:"role"`
	Epoch       uint64     `json:"epoch"`
	Storage     string     `json:"storage"`
	LastContact *time.Time `json:"lastContact,omitempty"`
	RTTMillis   float64    `json:"rttMillis,omitempty"`
	Version     string     `json:"version"`
}

// StatusNow builds the status document.
func (d *Daemon) StatusNow() Status {
	st := d.raft.FSM().State()
	members := d.members.Members()
	s := Status{SchemaVersion: SchemaVersion, Cluster: d.cfg.Cluster.Name, Node: d.self}
	seen := 0
	for _, m := range members {
		ns := NodeStatus{Name: m.Name, Address: m.Addr, Gossip: m.State, Raft: m.Meta.Raft, Role: m.Meta.Role,
			Epoch: m.Meta.Epoch, Storage: m.Meta.Storage, Version: m.Meta.Version, RTTMillis: float64(m.RTT.Microseconds()) / 1000}
		if !m.Contact.IsZero() {
			c := m.Contact.UTC().Truncate(time.Millisecond)
			ns.LastContact = &c
		}
		if m.State == "alive" || m.State == "suspect" {
			seen++
		} else {
			ns.Raft, ns.Role = "", ""
		}
		s.Nodes = append(s.Nodes, ns)
	}
	s.Quorum = QuorumStatus{Configured: len(d.cfg.Nodes), Seen: seen, Needed: d.cfg.Majority(), Leader: d.raft.Leader()}
	s.Quorum.Have = s.Quorum.Leader != "" && seen >= s.Quorum.Needed
	s.Primary = PrimaryInfo{Node: st.Holder, Epoch: st.Epoch, State: st.HolderState, Blocked: st.HolderState == quorum.HolderBlocked,
		Reason: st.Reason, Previous: st.Previous, Unconfirmed: st.Unconfirmed}
	left := quorum.Mono(d.leaseUntil.Load()).Sub(quorum.Now())
	if left < 0 || d.epoch.Load() == 0 {
		left = 0
	}
	s.Self = SelfStatus{Role: d.Role(), Acting: d.Acting(), Epoch: d.epoch.Load(), KnownEpoch: st.Epoch,
		LeaseLeftSec: left.Seconds(), Storage: d.storage.Load().(string), Raft: d.raft.RaftState(), Term: d.raft.Term(),
		Standby: st.Standby[d.self]}
	return s
}

// History is GET /v1/history.
type History struct {
	SchemaVersion int              `json:"schemaVersion"`
	Records       []stonith.Record `json:"records"`
}

// apiError is the JSON error body.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func (d *Daemon) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.StatusNow())
	})
	mux.HandleFunc("GET /v1/history", func(w http.ResponseWriter, r *http.Request) {
		st := d.raft.FSM().State()
		node := r.URL.Query().Get("node")
		h := History{SchemaVersion: SchemaVersion, Records: []stonith.Record{}}
		for _, rec := range st.History {
			if node == "" || rec.Target == node {
				h.Records = append(h.Records, rec)
			}
		}
		writeJSON(w, http.StatusOK, h)
	})
	d.adminRoutes(mux)
	d.resourceRoutes(mux)
	// Profiles for diagnosing a slow or busy daemon, on the local socket only.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, kind string, err error) {
	writeJSON(w, code, apiError{Error: err.Error(), Code: kind})
}
