package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage"
	"github.com/fenced/fenced/daemon/storage/tokenstore"
)

// TestSimWriterExitCodes runs `fenced sim storage` and `fenced sim writer`
// in-process: a writer whose epoch is superseded exits 3.
func TestSimWriterExitCodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logPath := filepath.Join(t.TempDir(), "writes.jsonl")
	simCtx, stopSim := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	simDone := make(chan int, 1)
	go func() {
		simDone <- Run(simCtx, []string{"sim", "storage", "--listen", "127.0.0.1:0", "--log", logPath}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the store's address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	f := strings.Fields(line)
	if len(f) < 3 || !strings.HasPrefix(f[2], "http://127.0.0.1:") {
		t.Fatalf("store printed %q", line)
	}
	url := f[2]

	t.Setenv("FENCED_NODE", "node1")
	t.Setenv("FENCED_EPOCH", "5")
	oldDone := make(chan int, 1)
	var oldErr strings.Builder
	go func() {
		oldDone <- Run(ctx, []string{"sim", "writer", "--url", url, "--interval", "10ms"}, strings.NewReader(""), io.Discard, &oldErr)
	}()
	time.Sleep(100 * time.Millisecond)
	newCtx, stopNew := context.WithCancel(ctx)
	newDone := make(chan int, 1)
	go func() {
		newDone <- Run(newCtx, []string{"sim", "writer", "--url", url, "--interval", "10ms", "--node", "node2", "--epoch", "6"}, strings.NewReader(""), io.Discard, io.Discard)
	}()
	select {
	case code := <-oldDone:
		if code != exitStale || !strings.Contains(oldErr.String(), "stale") {
			t.Fatalf("old writer exited %d: %s", code, oldErr.String())
		}
	case <-ctx.Done():
		t.Fatal("the superseded writer kept running")
	}
	stopNew()
	if code := <-newDone; code != 0 {
		t.Fatalf("current writer exited %d", code)
	}
	if code := Run(ctx, []string{"sim", "writer", "--url", url, "--epoch", "x"}, strings.NewReader(""), io.Discard, io.Discard); code != exitUsage {
		t.Fatalf("bad epoch: exit %d", code)
	}
	stopSim()
	if code := <-simDone; code != 0 {
		t.Fatalf("fenced sim storage exited %d", code)
	}
	entries, err := tokenstore.ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := tokenstore.Check(entries); err != nil {
		t.Fatal(err)
	}
	if ts := tokenstore.Tenures(entries); len(ts) != 2 || ts[0].Node != "node1" || ts[0].Rejected != 1 || ts[1].Node != "node2" {
		t.Fatalf("tenures %+v", ts)
	}
}

// TestTokenHooksTakeover is the storage side of a takeover with real
// processes: the generated hooks run the real `fenced sim writer` under the
// storage manager; node1 holds epoch 1, node2 takes over with epoch 2 while
// node1's writer still runs (a paused or cut-off primary), node1's writer is
// refused and exits, node1's monitor notices, and the checker proves the log.
func TestTokenHooksTakeover(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fenced")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building fenced: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "writes.jsonl")
	store, err := tokenstore.Start("127.0.0.1:0", logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	start, stop, monitor, err := tokenstore.WriteHooks(filepath.Join(dir, "hooks"), bin, store.URL)
	if err != nil {
		t.Fatal(err)
	}
	hooks := config.Storage{Hooks: config.Hooks{Start: start, Stop: stop, Monitor: monitor}}
	node1, err := storage.New(hooks, "node1", nil)
	if err != nil {
		t.Fatal(err)
	}
	node2, err := storage.New(hooks, "node2", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() { node1.Stop(context.Background()); node2.Stop(context.Background()) })

	if err := node1.Start(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return store.Highest() == 1 })
	if err := node1.Monitor(ctx); err != nil {
		t.Fatal(err)
	}
	if err := node2.Start(ctx, 2, "node1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return store.Highest() == 2 })
	// node1's writer meets the new token and exits; its monitor fails.
	waitUntil(t, func() bool { return node1.Monitor(ctx) != nil })
	err = node1.Monitor(ctx)
	if !strings.Contains(err.Error(), "has exited") || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("node1 monitor: %v", err)
	}
	if err := node2.Monitor(ctx); err != nil {
		t.Fatalf("node2 monitor: %v", err)
	}
	if err := node1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(store.Entries())
	waitUntil(t, func() bool { return len(store.Entries()) > before+3 })
	if err := node2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "hooks", "writer-node2.pid")); !os.IsNotExist(err) {
		t.Fatalf("pid file left after stop: %v", err)
	}
	if err := node2.Monitor(ctx); err == nil {
		t.Fatal("monitor passes with the writer stopped")
	}
	entries, err := tokenstore.ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := tokenstore.Check(entries); err != nil {
		t.Fatal(err)
	}
	ts := tokenstore.Tenures(entries)
	if len(ts) != 2 || ts[0].Node != "node1" || ts[0].Epoch != 1 || ts[0].Rejected != 1 || ts[1].Node != "node2" || ts[1].Epoch != 2 || ts[1].Rejected != 0 {
		t.Fatalf("tenures %+v", ts)
	}
	t.Logf("tenures: %+v", ts)
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
