package tokenstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func post(t *testing.T, url string, body string) (int, WriteResponse) {
	t.Helper()
	resp, err := http.Post(url+"/write", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var wr WriteResponse
	json.NewDecoder(resp.Body).Decode(&wr)
	return resp.StatusCode, wr
}

func TestStaleRejection(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "writes.jsonl")
	srv, err := Start("127.0.0.1:0", logPath)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		body   string
		code   int
		result string
	}{
		{`{"node":"node1","epoch":2,"seq":1,"data":"a"}`, 200, Accepted},
		{`{"node":"node1","epoch":2,"seq":2}`, 200, Accepted},
		{`{"node":"node2","epoch":3,"seq":1}`, 200, Accepted},
		{`{"node":"node1","epoch":2,"seq":3}`, 409, Stale},
		{`{"node":"node2","epoch":3,"seq":2}`, 200, Accepted},
		{`{"node":"node3","epoch":0,"seq":1}`, 400, Invalid},
		{`{"node":"node3","epoch":"x"}`, 400, Invalid},
		{`{"node":"node3","epoch":4,"extra":1}`, 400, Invalid},
	} {
		code, wr := post(t, srv.URL, c.body)
		if code != c.code || wr.Result != c.result {
			t.Errorf("write %d %s: %d %+v, want %d %s", i, c.body, code, wr, c.code, c.result)
		}
		if code == 409 && (wr.Highest != 3 || !strings.Contains(wr.Error, "epoch 2 is stale: epoch 3 already accepted")) {
			t.Errorf("stale answer %+v", wr)
		}
	}
	resp, err := http.Get(srv.URL + "/write")
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %v %v", resp, err)
	}
	resp.Body.Close()
	mem := srv.Entries()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	// The decoded-body failures never reached the log; the rest did, in order.
	if len(mem) != 6 {
		t.Fatalf("%d entries: %+v", len(mem), mem)
	}
	disk, err := ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		if !mem[i].Time.Equal(disk[i].Time) {
			t.Fatalf("entry %d time differs", i)
		}
		disk[i].Time = mem[i].Time
	}
	if !reflect.DeepEqual(mem, disk) {
		t.Fatalf("memory and file logs differ:\n%+v\n%+v", mem, disk)
	}
	if mem[3].Node != "node1" || mem[3].Result != Stale || mem[3].Highest != 3 {
		t.Fatalf("entry 4: %+v", mem[3])
	}
	if err := Check(disk); err != nil {
		t.Fatalf("a correct log fails the check: %v", err)
	}

	// Restarted on the same log, the store remembers the highest epoch.
	srv, err = Start("127.0.0.1:0", logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if code, _ := post(t, srv.URL, `{"node":"node1","epoch":2,"seq":4}`); code != 409 {
		t.Fatalf("stale epoch accepted after a restart: %d", code)
	}
	if n := len(srv.Entries()); n != 7 {
		t.Fatalf("restarted log has %d entries", n)
	}
}

func TestStartRefusesNonLoopback(t *testing.T) {
	if _, err := Start("0.0.0.0:0", ""); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("err %v", err)
	}
}

func TestCheckCatchesViolations(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	e := func(sec int, node string, epoch uint64, result string) Entry {
		return Entry{Time: t0.Add(time.Duration(sec) * time.Second), Node: node, Epoch: epoch, Result: result}
	}
	good := []Entry{
		e(0, "node1", 1, Accepted), e(1, "node1", 1, Accepted), e(2, "node2", 2, Accepted),
		e(3, "node1", 1, Stale), e(4, "node3", 0, Invalid), e(5, "node2", 2, Accepted), e(6, "node3", 5, Accepted),
	}
	if err := Check(good); err != nil {
		t.Fatalf("good log: %v", err)
	}
	stale := append(append([]Entry(nil), good[:3]...), e(3, "node1", 1, Accepted))
	err := Check(stale)
	if err == nil || !strings.Contains(err.Error(), "entry 4") || !strings.Contains(err.Error(), "stale epoch 1 after epoch 2 was accepted at entry 3") {
		t.Fatalf("stale acceptance: %v", err)
	}
	overlap := []Entry{e(0, "node1", 3, Accepted), e(1, "node2", 3, Accepted), e(2, "node1", 3, Accepted)}
	err = Check(overlap)
	if err == nil || !strings.Contains(err.Error(), "nodes node1 and node2 both had writes accepted under epoch 3") {
		t.Fatalf("overlap: %v", err)
	}
	// Both kinds in one log are both reported.
	both := append(append([]Entry(nil), stale...), e(9, "node9", 2, Accepted))
	err = Check(both)
	if err == nil || strings.Count(err.Error(), "\n") != 1 || !strings.Contains(err.Error(), "node2 and node9") {
		t.Fatalf("both: %v", err)
	}
	ts := Tenures(good)
	if len(ts) != 3 || ts[0].Node != "node1" || ts[0].Accepted != 2 || ts[0].Rejected != 1 || ts[1].Node != "node2" || ts[1].Accepted != 2 || !ts[1].Last.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("tenures %+v", ts)
	}
}

func TestParseLogErrors(t *testing.T) {
	_, err := ParseLog([]byte("{\"node\":\"a\",\"epoch\":1}\n\nnot json\n"), "w.jsonl")
	if err == nil || !strings.Contains(err.Error(), "w.jsonl line 3") {
		t.Fatalf("err %v", err)
	}
	p := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(p, []byte("{]\n"), 0o644)
	if _, err := New(p); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("New on a corrupt log: %v", err)
	}
}

// An old holder's writer stops at its first stale rejection; the new
// holder's writer keeps writing until told to stop.
func TestWriterExitsOnStale(t *testing.T) {
	srv, err := Start("127.0.0.1:0", filepath.Join(t.TempDir(), "w.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var oldErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		oldErr = RunWriter(ctx, srv.URL, "node1", 1, 10*time.Millisecond)
	}()
	waitFor(t, func() bool { return srv.Highest() == 1 })
	newCtx, stopNew := context.WithCancel(ctx)
	newDone := make(chan error, 1)
	go func() { newDone <- RunWriter(newCtx, srv.URL+"/write", "node2", 2, 10*time.Millisecond) }()
	wg.Wait()
	if !errors.Is(oldErr, ErrStale) || !strings.Contains(oldErr.Error(), "node1") || !strings.Contains(oldErr.Error(), "store has epoch 2") {
		t.Fatalf("old writer: %v", oldErr)
	}
	waitFor(t, func() bool { return len(srv.Entries()) > 10 })
	stopNew()
	if err := <-newDone; err != nil {
		t.Fatalf("new writer: %v", err)
	}
	entries := srv.Entries()
	if err := Check(entries); err != nil {
		t.Fatal(err)
	}
	ts := Tenures(entries)
	if len(ts) != 2 || ts[0].Rejected != 1 || ts[0].Accepted == 0 || ts[1].Accepted == 0 || ts[1].Rejected != 0 {
		t.Fatalf("tenures %+v", ts)
	}
}

// A store that cannot be reached is retried, not a reason to stop.
func TestWriterRetriesUnreachableStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = (&Writer{URL: url, Node: "node1", Epoch: 1, Interval: 20 * time.Millisecond, Log: &log}).Run(ctx)
	if err != nil || strings.Count(log.String(), "retrying") < 2 {
		t.Fatalf("err %v, log %q", err, log.String())
	}
	if err := RunWriter(context.Background(), url, "", 1, time.Millisecond); err == nil {
		t.Fatal("writer without a node accepted")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func FuzzParseLog(f *testing.F) {
	f.Add([]byte(`{"time":"2025-01-01T00:00:00Z","node":"a","epoch":1,"seq":1,"result":"accepted","highest":0}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if entries, err := ParseLog(b, "fuzz"); err == nil {
			Check(entries)
			Tenures(entries)
		}
	})
}
