package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenced/fenced/daemon/api"
)

// fakeDaemon serves /v1/status on a unix socket from status(), which may
// change between calls; down makes it answer 503.
type fakeDaemon struct {
	sock  string
	epoch atomic.Uint64
	down  atomic.Bool
}

func startFake(t *testing.T) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{sock: filepath.Join(t.TempDir(), "fake.sock")}
	f.epoch.Store(3)
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(api.Error{SchemaVersion: 1, Message: "no primary-elect", Code: api.CodeFailed})
			return
		}
		now := time.Now().UTC()
		e := f.epoch.Load()
		json.NewEncoder(w).Encode(api.Status{SchemaVersion: 1, Cluster: "c", Node: "node1",
			Quorum:  api.QuorumStatus{Configured: 3, Seen: 3, Needed: 2, Have: true, Leader: "node1"},
			Primary: api.PrimaryInfo{Node: "node1", Epoch: e, State: "mounted"},
			Self:    api.SelfStatus{Role: "primary", Acting: true, Epoch: e, KnownEpoch: e, LeaseLeftSec: float64(now.Nanosecond()) / 1e9, Raft: "Leader", Term: 2},
			Nodes:   []api.NodeStatus{{Name: "node1", Kind: "data", Gossip: "alive", Raft: "Leader", Role: "primary", Epoch: e, LastContact: &now, RTTMillis: float64(now.Nanosecond() % 1000)}}})
	})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return f
}

// runWatch runs `status --watch` for d, then cancels it; it returns the
// exit code and what was written.
func runWatch(t *testing.T, out, errw *syncBuffer, d time.Duration, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- Run(ctx, append(args, "status", "--watch", "--interval", "50ms"), strings.NewReader(""), out, errw)
	}()
	time.Sleep(d)
	cancel()
	select {
	case code := <-done:
		return code
	case <-time.After(5 * time.Second):
		t.Fatal("status --watch did not end on cancel")
		return -1
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Without a terminal, --watch prints a line per change (and nothing for
// what changes on every poll: lease left, last contact), says when the
// daemon stops answering and when it is back, and ends with 0 on cancel.
func TestWatchLines(t *testing.T) {
	f := startFake(t)
	var out, errw syncBuffer
	go func() {
		time.Sleep(300 * time.Millisecond)
		f.epoch.Store(4)
		time.Sleep(300 * time.Millisecond)
		f.down.Store(true)
		time.Sleep(300 * time.Millisecond)
		f.down.Store(false)
	}()
	if code := runWatch(t, &out, &errw, 1200*time.Millisecond, "--socket", f.sock); code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
	s := out.String()
	for _, want := range []string{"quorum: yes — 3 of 3 configured nodes seen, 2 needed, leader node1", "primary: node1, epoch 3, mounted", "primary: node1, epoch 4, mounted",
		"fenced does not answer: no primary-elect"} {
		if !strings.Contains(s, want) {
			t.Errorf("watch lines lack %q:\n%s", want, s)
		}
	}
	// The first poll, the epoch change (primary, this node, node1), the
	// outage, and everything again once it answers.
	if n, c := strings.Count(s, "\n"), strings.Count(s, "primary: node1, epoch 4"); n < 9 || n > 14 || c != 2 {
		t.Errorf("%d lines (%d with epoch 4) from 4 changes:\n%s", n, c, s)
	}
}

func TestWatchJSON(t *testing.T) {
	f := startFake(t)
	var out, errw syncBuffer
	go func() { time.Sleep(300 * time.Millisecond); f.epoch.Store(4) }()
	if code := runWatch(t, &out, &errw, 700*time.Millisecond, "--socket", f.sock, "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
	if n := checkSchemaLines(t, "status.json", out.String()); n != 2 {
		t.Errorf("%d documents for one change, want 2:\n%s", n, out.String())
	}
}

// On a terminal, --watch redraws the screen in place.
func TestWatchRedrawsOnTerminal(t *testing.T) {
	f := startFake(t)
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	defer ptm.Close()
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	var screen syncBuffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptm.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"--socket", f.sock, "status", "--watch", "--interval", "50ms"}, strings.NewReader(""), pts, pts)
	}()
	time.Sleep(400 * time.Millisecond)
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
	time.Sleep(100 * time.Millisecond)
	pts.Close()
	ptm.Close()
	<-read
	s := screen.String()
	if c := strings.Count(s, "\x1b[H"); c < 3 {
		t.Errorf("%d redraws in 400ms at 50ms:\n%q", c, s)
	}
	for _, want := range []string{"Every 50ms: fencectl status", "Quorum:   yes", "NODE"} {
		if !strings.Contains(s, want) {
			t.Errorf("screen lacks %q:\n%q", want, s)
		}
	}
}
