package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// SchemaVersion of the JSON the API returns and `fencectl -o json` prints.
const SchemaVersion = api.SchemaVersion

// AdminRequest is the body of the admin calls (package api holds the wire
// types; the name stays here for the daemon's callers).
type AdminRequest = api.AdminRequest

// Bounds of the API server. The socket is local and only root and the
// api.group may open it, but a stuck or broken client must still not hold
// the daemon's descriptors or goroutines for ever.
const (
	apiMaxConns      = 64               // connections served at once; more wait in the kernel's backlog
	apiHeaderTimeout = 5 * time.Second  // from connect to the end of the headers
	apiBodyTimeout   = 10 * time.Second // for the whole request body
	apiWriteTimeout  = 30 * time.Second // for writing an answer
	apiIdleTimeout   = 30 * time.Second // keep-alive between requests
	// A fence may legitimately run for minutes (every level, every
	// device, retries): the handler, not a read deadline, bounds it.
	adminTimeout = api.AdminTimeout
)

// newAPIServer is the HTTP server of the API socket.
func (d *Daemon) newAPIServer() *http.Server {
	return &http.Server{
		Handler:           readBody(d.apiHandler()),
		ReadHeaderTimeout: apiHeaderTimeout,
		IdleTimeout:       apiIdleTimeout,
		ConnContext:       peerContext,
		ErrorLog:          slog.NewLogLogger(d.log.With("component", "api").Handler(), slog.LevelDebug),
	}
}

// readBody reads the whole request body before the handler runs, within
// apiBodyTimeout and MaxRequestBody. Go's server-wide ReadTimeout cannot do
// this: it also cancels the context of a handler that is still running (a
// fence) once it expires.
func readBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// A deadline left from an earlier answer on this connection
		// must not cut a long handler's answer.
		_ = rc.SetWriteDeadline(time.Time{})
		if r.Body != nil && r.Body != http.NoBody {
			_ = rc.SetReadDeadline(time.Now().Add(apiBodyTimeout))
			data, err := io.ReadAll(io.LimitReader(r.Body, api.MaxRequestBody+1))
			_ = rc.SetReadDeadline(time.Time{})
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusRequestTimeout, api.CodeTimeout, fmt.Errorf("request body not received within %v", apiBodyTimeout))
				return
			case err != nil:
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Errorf("request body: %w", err))
				return
			case len(data) > api.MaxRequestBody:
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Errorf("request body over %d bytes", api.MaxRequestBody))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(data))
		}
		next.ServeHTTP(w, r)
	})
}

// capListener hands out at most cap connections at once: Accept waits
// for one to close, and further clients queue in the kernel's listen
// backlog. It bounds the descriptors and goroutines clients can take.
type capListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newCapListener(ln net.Listener, n int) *capListener {
	return &capListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *capListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &cappedConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

func (l *capListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type cappedConn struct {
	net.Conn
	release func()
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// NetConn is the accepted connection (for its peer credentials).
func (c *cappedConn) NetConn() net.Conn { return c.Conn }

// checkSocketPath refuses an api.socket path that names anything but a
// socket: the daemon replaces a stale socket at start, and must never
// delete a file or directory that happens to have that name.
func checkSocketPath(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().Type() == fs.ModeSocket:
		return nil
	}
	kind := "a " + strings.TrimPrefix(fi.Mode().Type().String(), "-")
	switch t := fi.Mode().Type(); {
	case t.IsRegular():
		kind = "a regular file"
	case t.IsDir():
		kind = "a directory"
	case t&fs.ModeSymlink != 0:
		kind = "a symbolic link"
	case t&fs.ModeDevice != 0:
		kind = "a device"
	case t&fs.ModeNamedPipe != 0:
		kind = "a named pipe"
	}
	return fmt.Errorf("%s exists and is %s, not a socket: remove it or choose another path (fenced replaces only a stale socket)", path, kind)
}

// listenAPI opens the control socket with mode 0660 (owner and group).
func listenAPI(path, group string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("api.socket %s: %w", path, err)
	}
	if err := checkSocketPath(path); err != nil {
		return nil, fmt.Errorf("api.socket %w", err)
	}
	// A stale socket from a crashed daemon is removed only if nothing
	// answers on it; a live one means another fenced runs.
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("api.socket %s: another fenced is running", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("api.socket %s: removing the stale socket: %w", path, err)
	}
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
	return newCapListener(ln, apiMaxConns), nil
}

// The API's wire types live in package api (fencectl uses them without
// linking the daemon); these names stay for the daemon's callers.
type (
	Status  = api.Status
	History = api.History
)

// kindOf is a node's configured role: data or witness.
func (d *Daemon) kindOf(name string) string {
	if n, ok := d.config().NodeByName(name); ok && n.Witness() {
		return config.RoleWitness
	}
	return config.RoleData
}

// StatusNow builds the status document.
func (d *Daemon) StatusNow() Status {
	st := d.raft.FSM().State()
	members := d.members.Members()
	s := Status{SchemaVersion: SchemaVersion, Cluster: d.cfg.Cluster.Name, Node: d.self}
	letters := map[string]string{}
	for _, m := range members {
		ns := api.NodeStatus{Name: m.Name, Kind: d.kindOf(m.Name), Address: m.Addr, Gossip: m.State, Raft: m.Meta.Raft, Role: m.Meta.Role,
			Epoch: m.Meta.Epoch, Storage: m.Meta.Storage, Version: m.Meta.Version, RTTMillis: float64(m.RTT.Microseconds()) / 1000,
			Config: m.Meta.Config, Standby: st.Standby[m.Name]}
		if !m.Contact.IsZero() {
			c := m.Contact.UTC().Truncate(time.Millisecond)
			ns.LastContact = &c
		}
		if m.Name == d.self {
			ns.Keys = d.members.KeyIDs()
		} else if m.Meta.Keys != "" {
			// As last advertised, also of a node gone: one shut out by a
			// removed key shows the keys it had.
			ns.Keys = strings.Split(m.Meta.Keys, ",")
		}
		if m.State == "alive" || m.State == "suspect" {
			letters[m.Name] = m.Meta.Resources
		} else {
			ns.Raft, ns.Role, ns.Config = "", "", ""
		}
		s.Nodes = append(s.Nodes, ns)
	}
	s.Quorum = d.quorumNow()
	// Without quorum the replicated state is what this node last
	// learned: the primary it names may be long gone.
	s.Primary = api.PrimaryInfo{Node: st.Holder, Epoch: st.Epoch, State: st.HolderState, Blocked: st.HolderState == quorum.HolderBlocked,
		Reason: st.Reason, Previous: st.Previous, Unconfirmed: st.Unconfirmed, Unclean: st.Unclean,
		LastKnown: !s.Quorum.Have, Since: wallPtr(st.GrantedAt), Change: primacyChange(st)}
	markStale(s.Nodes, d.self, st, d.cfg.Timing.Lease.D(), time.Now())
	s.PendingFences = pendingFences(st, d.fence.engine.Steps(), time.Now())
	s.Resources = resourcePlaces(d.self, d.resourceStatus(), s.Nodes, letters, fencedNodes(st))
	s.Self = api.SelfStatus{Role: d.Role(), Acting: d.Acting(), Epoch: d.Epoch(), KnownEpoch: st.Epoch,
		LeaseLeftSec: d.LeaseLeft().Seconds(), Storage: d.Storage(), Raft: d.raft.RaftState(), Term: d.raft.Term(),
		Standby: st.Standby[d.self], Ineligible: d.Ineligible(), NotReady: d.sessionsReason(), Watchdog: d.watchdogStatus(),
		Keys: d.members.KeyIDs()}
	s.FencePaths = d.fencePaths()
	s.Config = d.configStatus(s.Nodes)
	v := d.versionView()
	s.ClusterVersion = &api.ClusterVersion{Committed: v.Committed, Supported: quorum.ClusterVersionMax, HeldBy: v.HeldBy}
	if h := d.raft.FSM().Halted(); h != nil {
		s.ClusterVersion.Halted = h.Error()
	}
	return s
}

// markStale keeps gossip from contradicting the replicated state: a
// node's gossip older than one lease is marked stale, only the replicated
// holder is shown as primary (a dead primary's last gossip says primary
// for seconds after it died), and a node gossip does not see is shown as
// the replicated state knows it (fenced, by whom and when; unclean;
// maybe running the storage).
func markStale(nodes []api.NodeStatus, self string, st quorum.State, lease time.Duration, now time.Time) {
	for i := range nodes {
		n := &nodes[i]
		alive := n.Gossip == "alive" || n.Gossip == "suspect"
		if n.Name != self && (n.LastContact == nil || now.Sub(*n.LastContact) > lease) {
			n.Stale = true
		}
		if (n.Role == RolePrimary || n.Role == RolePrimaryElect) && (n.Name != st.Holder || n.Epoch != st.Epoch) {
			n.Stale = true
		}
		if alive {
			continue
		}
		n.Role, n.Storage = "", ""
		switch _, unclean := st.Unclean[n.Name]; {
		case unclean:
			n.Down = "unclean"
		case st.Unconfirmed[n.Name] > 0:
			n.Down = "unconfirmed"
		}
		for j := len(st.History) - 1; j >= 0 && n.Down == ""; j-- {
			r := st.History[j]
			if r.Target != n.Name || !fencing.Stopping(r.Kind) {
				continue
			}
			if r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomeSuccess && r.Action != fencing.ActionOn {
				at := r.Finished.UTC().Truncate(time.Millisecond)
				n.Down, n.FencedAt, n.FencedBy = "fenced", &at, r.Executor
			}
			break
		}
	}
}

func (d *Daemon) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.StatusNow())
	})
	mux.HandleFunc("GET /v1/history", func(w http.ResponseWriter, r *http.Request) {
		st := d.raft.FSM().State()
		node := r.URL.Query().Get("node")
		h := History{SchemaVersion: SchemaVersion, Records: []api.Record{}}
		for _, rec := range st.History {
			if node == "" || rec.Target == node {
				h.Records = append(h.Records, rec)
			}
		}
		writeJSON(w, http.StatusOK, h)
	})
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.VersionInfo{SchemaVersion: SchemaVersion, Node: d.self, Version: api.Version, Go: runtime.Version()})
	})
	d.adminRoutes(mux)
	d.configRoutes(mux)
	d.resourceRoutes(mux)
	d.reportRoutes(mux)
	// Profiles for diagnosing a slow or busy daemon, on the local socket only.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(apiWriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, kind string, err error) {
	writeJSON(w, code, api.Error{SchemaVersion: SchemaVersion, Message: err.Error(), Code: kind})
}
