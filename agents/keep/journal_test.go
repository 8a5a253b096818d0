package keep

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
)

func rec(dev, id string) agents.SessionRecord {
	return agents.SessionRecord{Device: dev, Agent: "ipmi", Address: "10.0.0.5:623", ID: id, Opened: time.Now().UTC().Truncate(time.Second)}
}

// logBuf is a logger whose lines a test reads.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLog() (*slog.Logger, *logBuf) {
	b := &logBuf{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

// The journal lists the open sessions in its file, mode 0600, rewritten at
// each change without leaving a temporary file behind; the next process
// reads what the last one left open, and those stay listed until closed.
func TestJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sessions.json")
	j, left := OpenJournal(path, nil)
	if len(left) != 0 {
		t.Fatalf("a journal without a file lists %v", left)
	}
	a, b, c := rec("n1-bmc", "0000abcd"), rec("n2-bmc", "00001234"), rec("n2-bmc", "00005678")
	j.Opened(a)
	j.Opened(b)
	j.Opened(b) // once
	j.Opened(c)
	j.Closed(b)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("files beside the journal: %v", ents)
	}
	_, left = OpenJournal(path, nil)
	if len(left) != 2 || left[0] != a || left[1] != c {
		t.Fatalf("left open: %+v, want %+v and %+v", left, a, c)
	}
	j2, _ := OpenJournal(path, nil)
	j2.Closed(agents.SessionRecord{Agent: a.Agent, Address: a.Address, ID: a.ID}) // whatever device name
	if open := j2.Open(); len(open) != 1 || open[0] != c {
		t.Fatalf("after closing one: %+v", open)
	}
	if _, left = OpenJournal(path, nil); len(left) != 1 {
		t.Fatalf("the file after closing one: %+v", left)
	}
}

// A corrupt, foreign, stale or unreadable file lists nothing and says so
// in the log; the next write replaces it.
func TestJournalBadFiles(t *testing.T) {
	dir := t.TempDir()
	stale, _ := json.Marshal(journalFile{Version: journalVersion, Written: time.Now().Add(-JournalStaleAfter - time.Hour), Sessions: []agents.SessionRecord{rec("d", "00000001")}})
	future, _ := json.Marshal(journalFile{Version: journalVersion + 1, Written: time.Now(), Sessions: []agents.SessionRecord{rec("d", "00000001")}})
	incomplete, _ := json.Marshal(journalFile{Version: journalVersion, Written: time.Now(), Sessions: []agents.SessionRecord{{Device: "d", Agent: "ipmi"}, rec("d", "00000002")}})
	for _, tc := range []struct {
		name, content, log string
		left               int
	}{
		{"truncated", `{"version":1,"sessions":[{"dev`, "session journal is corrupt", 0},
		{"not json", "\x00\x01garbage", "session journal is corrupt", 0},
		{"other version", string(future), "version 2, want 1", 0},
		{"stale", string(stale), "session journal is stale", 0},
		{"incomplete entry", string(incomplete), "ignoring an incomplete entry", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			log, buf := newLog()
			j, left := OpenJournal(path, log)
			if len(left) != tc.left {
				t.Errorf("left open: %+v, want %d", left, tc.left)
			}
			if !strings.Contains(buf.String(), tc.log) || !strings.Contains(buf.String(), path) {
				t.Errorf("log %q, want %q naming the file", buf.String(), tc.log)
			}
			j.Opened(rec("d", "000000ff"))
			if _, left := OpenJournal(path, nil); len(left) != tc.left+1 {
				t.Errorf("after a write: %+v", left)
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		path := filepath.Join(dir, "a-directory")
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		log, buf := newLog()
		j, left := OpenJournal(path, log)
		if len(left) != 0 || !strings.Contains(buf.String(), "session journal unreadable") {
			t.Errorf("left %v, log %q", left, buf.String())
		}
		// Writes fail: logged once, the journal goes on in memory.
		j.Opened(rec("d", "00000001"))
		j.Opened(rec("d", "00000002"))
		if n := strings.Count(buf.String(), "cannot write the session journal"); n != 1 {
			t.Errorf("%d write failures logged, want 1: %q", n, buf.String())
		}
		if len(j.Open()) != 2 {
			t.Errorf("in memory: %v", j.Open())
		}
	})
}
