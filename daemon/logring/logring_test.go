package logring

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The ring keeps the newest lines within its bound, with their fields,
// and says when the period asked for starts before what it still holds.
func TestRingBoundAndSince(t *testing.T) {
	r := New(4 << 10)
	log := slog.New(r.Handler(nil)).With("node", "node1")
	start := time.Now()
	for i := range 200 {
		log.Info("tick", "i", i)
	}
	text, cut := r.Since(start)
	if len(text) > 4<<10 || len(text) < 3<<10 {
		t.Fatalf("ring holds %d bytes, bound 4096", len(text))
	}
	if !cut {
		t.Error("200 lines in a 4 KiB ring: the period from the first line was cut, and Since does not say so")
	}
	lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "msg=tick node=node1 i=199") || !strings.HasPrefix(last, "time=") {
		t.Errorf("newest line %q: want its time, message and fields", last)
	}
	if strings.Contains(string(text), " i=0\n") {
		t.Error("the oldest line is still in a full ring")
	}

	// Only the lines of the period.
	time.Sleep(5 * time.Millisecond)
	mid := time.Now()
	log.Warn("later")
	text, cut = r.Since(mid)
	if got := strings.TrimSpace(string(text)); !strings.Contains(got, "msg=later") || strings.Count(got, "\n") != 0 || cut {
		t.Errorf("since the middle: %q (cut %v), want the one later line, nothing cut", got, cut)
	}
}

// The ring applies its own level, and a line longer than the ring keeps its
// end.
func TestRingLevelAndLongLine(t *testing.T) {
	r := New(100)
	log := slog.New(r.Handler(&slog.HandlerOptions{Level: slog.LevelWarn}))
	log.Info("not kept")
	if text, _ := r.Since(time.Time{}); len(text) != 0 {
		t.Fatalf("info line kept at level warn: %q", text)
	}
	log.Warn("long", "v", strings.Repeat("x", 300)+"END")
	text, _ := r.Since(time.Time{})
	if len(text) != 100 || !bytes.HasSuffix(text, []byte("END\n")) {
		t.Errorf("long line: %d bytes %q", len(text), text)
	}
}
