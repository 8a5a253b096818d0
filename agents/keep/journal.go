package keep

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fenced/fenced/agents"
)

// Journal is an agents.SessionLedger kept in a file: the sessions this
// process's agents hold open on their devices, rewritten at each change, so
// that the next process can close those a kill or a crash left open (see
// agents.SessionRecord). It never holds a secret; the file is the
// process's own (mode 0600) all the same.
//
// Each write replaces the file whole (a new file beside it, synced, then
// renamed over it), so a crash leaves the old list or the new one, never a
// mix. A write that fails is logged and the journal goes on in memory: the
// sessions are still logged out as usual, only a crash would leave them to
// their devices to expire.
type Journal struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	recs    []agents.SessionRecord
	failing bool // the last write failed (logged once per run of failures)
}

// journalVersion is the file's format.
const journalVersion = 1

// JournalStaleAfter is the age past which a journal's sessions are not
// closed at start: the specifications bound how long a device keeps an
// idle session (IPMI v2.0's default inactivity timeout is 60 seconds;
// Redfish's SessionTimeout is at most 86,400 seconds), so those listed in a
// file last written longer ago have expired, and their IDs may have been
// given to other clients since.
const JournalStaleAfter = 24 * time.Hour

type journalFile struct {
	Version  int                    `json:"version"`
	Written  time.Time              `json:"written"`
	Sessions []agents.SessionRecord `json:"sessions"`
}

// OpenJournal opens the journal at path ("" keeps it in memory only) and
// returns the sessions it lists: those the previous process left open,
// which stay in the journal until they are reported closed. A missing file
// lists none. A file that cannot be read or is not a journal, and one last
// written more than JournalStaleAfter ago, list none either: the log says
// why, and the next write replaces the file.
func OpenJournal(path string, log *slog.Logger) (*Journal, []agents.SessionRecord) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	j := &Journal{path: path, log: log.With("path", path)}
	j.recs = j.read()
	return j, slices.Clone(j.recs)
}

func (j *Journal) read() []agents.SessionRecord {
	if j.path == "" {
		return nil
	}
	b, err := os.ReadFile(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		j.log.Warn("session journal unreadable: sessions a previous run left open, if any, are left for their devices to expire", "err", err)
		return nil
	}
	var f journalFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version != journalVersion {
		why := fmt.Sprintf("version %d, want %d", f.Version, journalVersion)
		if err != nil {
			why = err.Error()
		}
		j.log.Warn("session journal is corrupt, replacing it: sessions a previous run left open, if any, are left for their devices to expire", "err", why)
		return nil
	}
	if age := time.Since(f.Written); age > JournalStaleAfter {
		if len(f.Sessions) > 0 {
			j.log.Info("session journal is stale: its sessions have expired on their devices, not closing them",
				"written", f.Written.UTC().Format(time.RFC3339), "sessions", len(f.Sessions))
		}
		return nil
	}
	var recs []agents.SessionRecord
	for _, r := range f.Sessions {
		if r.Agent == "" || r.Address == "" || r.ID == "" {
			j.log.Warn("session journal: ignoring an incomplete entry", "device", r.Device, "agent", r.Agent, "address", r.Address)
			continue
		}
		recs = append(recs, r)
	}
	return recs
}

// Opened records an open session.
func (j *Journal) Opened(r agents.SessionRecord) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if slices.ContainsFunc(j.recs, func(o agents.SessionRecord) bool { return same(o, r) }) {
		return
	}
	j.recs = append(j.recs, r)
	j.writeLocked()
}

// Closed forgets a session: logged out, or given up.
func (j *Journal) Closed(r agents.SessionRecord) {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := len(j.recs)
	j.recs = slices.DeleteFunc(j.recs, func(o agents.SessionRecord) bool { return same(o, r) })
	if len(j.recs) != n {
		j.writeLocked()
	}
}

// Open lists the sessions the journal holds now.
func (j *Journal) Open() []agents.SessionRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.recs)
}

// same: one session, whichever device entry recorded it.
func same(a, b agents.SessionRecord) bool {
	return a.Agent == b.Agent && a.Address == b.Address && a.ID == b.ID
}

func (j *Journal) writeLocked() {
	if j.path == "" {
		return
	}
	err := j.write()
	switch {
	case err != nil && !j.failing:
		j.log.Warn("cannot write the session journal: a crash now would leave sessions open on their devices until they expire", "err", err)
	case err == nil && j.failing:
		j.log.Info("session journal written again")
	}
	j.failing = err != nil
}

// write replaces the file with the journal's list: a new file beside it,
// synced, renamed over it, and the directory synced.
func (j *Journal) write() error {
	b, err := json.MarshalIndent(journalFile{Version: journalVersion, Written: time.Now().UTC(), Sessions: j.recs}, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(j.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(j.path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // once renamed, a no-op
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
