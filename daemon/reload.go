package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/quorum"
)

// ReloadError is a reload that was refused: the running configuration
// stays in force. Problems are the file's, each at its line.
type ReloadError struct {
	File     string
	Problems config.Problems
	// Restart marks problems that only a restart can apply.
	Restart bool
}

func (e *ReloadError) Error() string {
	what := "configuration invalid"
	if e.Restart {
		what = "changes that need a restart"
	}
	return fmt.Sprintf("reload of %s refused (%s); the running configuration stays in force:\n%s", e.File, what, e.Problems.Error())
}

// ErrorKind travels with the error when it is forwarded.
func (e *ReloadError) ErrorKind() string { return api.CodeRefused }

// Reload reads the configuration file again and applies it without a
// restart: devices (parameters, secrets' files, timeouts, monitor
// intervals), fence topologies, alerts and the cluster keys of
// gossip.key_file. The new file is checked first
// as at start (LoadConfig); a file with problems, or one that changes what
// only a restart can (config.RestartNeeded), is refused as a whole and the
// running configuration stays. SIGHUP and `fencectl reload` call it.
func (d *Daemon) Reload(ctx context.Context) (api.ReloadReply, error) {
	d.conf.reloadMu.Lock()
	defer d.conf.reloadMu.Unlock()
	file := d.cfg.File()
	reg := d.registry()
	next, err := LoadConfig(file, d.self, "", reg)
	if err == nil {
		if ps := config.RestartNeeded(d.conf.base, next); len(ps) > 0 {
			err = &ReloadError{File: file, Problems: ps, Restart: true}
		}
	} else {
		var ps config.Problems
		if errors.As(err, &ps) {
			err = &ReloadError{File: file, Problems: ps}
		} else {
			err = &ReloadError{File: file, Problems: config.Problems{{File: file, Msg: err.Error()}}}
		}
	}
	var keys [][]byte
	if err == nil {
		// The key file's path cannot change (RestartNeeded), its keys can:
		// a rotation is three reloads (README, "Rotating the cluster key").
		if keys, err = clusterKeys(next); err != nil {
			err = &ReloadError{File: file, Problems: config.Problems{next.Problem("gossip.key_file", "%s", err.Error())}}
		}
	}
	now := time.Now()
	if err != nil {
		var re *ReloadError
		errors.As(err, &re)
		for _, p := range re.Problems {
			d.log.Error("reload refused: the running configuration stays in force", "problem", p.String())
		}
		d.setLastReload(&api.ReloadInfo{Time: wallPtr(now), OK: false, Error: err.Error()})
		return api.ReloadReply{}, err
	}
	running := d.config()
	changed := config.LiveChanges(running, next)
	if c, err := d.setKeys(keys); err != nil {
		err = &ReloadError{File: file, Problems: config.Problems{next.Problem("gossip.key_file", "%s", err.Error())}}
		d.log.Error("reload refused: the running configuration stays in force", "problem", err.Error())
		d.setLastReload(&api.ReloadInfo{Time: wallPtr(now), OK: false, Error: err.Error()})
		return api.ReloadReply{}, err
	} else if c {
		changed = append(changed, "gossip.key_file (keys "+strings.Join(quorum.KeyIDs(keys), ", ")+")")
	}
	// The fingerprint is the file's, as at start; what cannot change is
	// then the running configuration's (equal to the file's but for what
	// start adjusted: the storage's monitor interval).
	d.setOwnConfig(next)
	next.Storage, next.Resources = running.Storage, running.Resources
	d.conf.live.Store(next)
	d.SetMetaNow()
	d.fence.health.Reconfigure(ctx, deviceWatchList(next))
	d.alerts.Configure(next.AlertAgents())
	d.reconfigureTenure()
	d.setLastReload(&api.ReloadInfo{Time: wallPtr(now), OK: true})
	own := d.conf.own.Load()
	reply := api.ReloadReply{SchemaVersion: SchemaVersion, Node: d.self, File: file, Changed: changed, Fingerprint: own.hash}
	if c := d.raft.FSM().Config(); c != nil {
		reply.Committed, reply.Match = c.Hash, c.Hash == own.hash
	}
	if changed == nil {
		reply.Changed = []string{}
	}
	d.log.Info("configuration reloaded", "file", file, "changed", fmt.Sprint(changed), "fingerprint", own.hash, "matches_cluster", reply.Match)
	for _, w := range Warnings(next, reg) {
		d.log.Warn("configuration", "warning", w.String())
	}
	return reply, nil
}

// setKeys makes keys (primary first) those of gossip and raft from now on,
// and says whether they changed. Raft's first: its TLS is the one that can
// fail to build, and a node must not encrypt gossip with a key its raft
// does not accept yet.
func (d *Daemon) setKeys(keys [][]byte) (bool, error) {
	if d.raft == nil || d.members == nil {
		return false, nil
	}
	rc, err := d.raft.SetKeys(keys)
	if err != nil {
		return false, err
	}
	gc, err := d.members.SetKeys(keys)
	if err != nil {
		return false, err
	}
	// Each logged its change (IDs only); "configuration reloaded" lists it.
	if gc {
		d.warnKeysNotHeld(quorum.KeyID(keys[0]))
	}
	if rc {
		// A peer keeps its raft connections made under a removed key
		// while it encrypts with a key this node holds, as it last
		// advertised (a node it knows nothing of keeps them too).
		ours := quorum.KeyIDs(keys)
		d.raft.CloseRemovedKeyConns(func(peer string) bool {
			m, ok := d.members.LastMeta(peer)
			if !ok || m.Keys == "" {
				return true
			}
			primary, _, _ := strings.Cut(m.Keys, ",")
			return slices.Contains(ours, primary)
		})
	}
	return rc || gc, nil
}

// warnKeysNotHeld warns of the nodes in gossip that, as they last
// advertised, lack primary, the key this node now encrypts with: they cannot
// read it until they have it (a rotation's second step begun before the
// first ended everywhere). Not refused: shutting a node out is what removing
// its key is for.
func (d *Daemon) warnKeysNotHeld(primary string) {
	for _, m := range d.members.Members() {
		if m.Name == d.self || m.Meta.Keys == "" || m.State != "alive" && m.State != "suspect" {
			continue
		}
		if held := strings.Split(m.Meta.Keys, ","); !slices.Contains(held, primary) {
			d.log.Warn("cluster keys: this node now encrypts with a key another node does not hold: that node cannot read this one until it has it",
				"key", primary, "peer", m.Name, "peer_keys", m.Meta.Keys)
		}
	}
}

// ConfigFile is the configuration file the daemon runs (and reloads).
func (d *Daemon) ConfigFile() string { return d.cfg.File() }

func (d *Daemon) setLastReload(r *api.ReloadInfo) {
	d.conf.cw.mu.Lock()
	d.conf.cw.lastReload = r
	d.conf.cw.mu.Unlock()
}

// configRoutes serves reload, config accept and the configurations' keys.
func (d *Daemon) configRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/config/keys", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.configKeys())
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		reply, err := d.Reload(r.Context())
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeRefused, err)
			return
		}
		writeJSON(w, http.StatusOK, reply)
	})
	mux.HandleFunc("POST /v1/config/accept", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // read and bounded by readBody
		req, err := api.DecodeAdminRequest(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, err)
			return
		}
		req.RequestedBy = "fencectl@" + d.self
		if u := peerUser(r.Context()); u != "" {
			req.RequestedBy = api.CleanText(u) + "@" + d.self
		}
		ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
		defer cancel()
		out, err := d.configAccept(ctx, req)
		if err != nil {
			status, code := adminErrorStatus(err)
			writeError(w, status, code, err)
			return
		}
		writeAdminReply(w, fwdConfigAccept, out)
	})
}
