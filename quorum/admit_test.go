package quorum

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func tcpAddr(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }

// TestAdmissionCaps: strangers are capped per address and together; a
// configured node's address has a cap of its own that strangers cannot
// use up; releasing frees the place once.
func TestAdmissionCaps(t *testing.T) {
	a := newAdmission(admitLimits{PerSource: 2, Total: 3, PerKnown: 4}, map[netip.Addr]bool{netip.MustParseAddr("10.0.0.1"): true})
	admit := func(ip, wantReason string) func() {
		t.Helper()
		rel, reason := a.admit(tcpAddr(ip))
		if reason != wantReason {
			t.Fatalf("admit %s: reason %q, want %q", ip, reason, wantReason)
		}
		return rel
	}
	r1 := admit("10.0.0.9", "")
	admit("10.0.0.9", "")
	admit("10.0.0.9", refusedPerSource)
	admit("10.0.0.8", "")
	admit("10.0.0.7", refusedTotal)
	for range 4 {
		admit("10.0.0.1", "") // the strangers' total does not count
	}
	admit("10.0.0.1", refusedPerSource)
	if total, strangers := a.held(); total != 7 || strangers != 3 {
		t.Fatalf("held %d (%d strangers), want 7 (3)", total, strangers)
	}
	r1()
	r1() // a second release frees nothing more
	admit("10.0.0.7", "")
	admit("10.0.0.6", refusedTotal)
	// IPv4 in IPv6 counts as the same address.
	if _, reason := a.admit(&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1")}); reason != refusedPerSource {
		t.Fatalf("mapped address: reason %q", reason)
	}
}

// logRecords collects the records logged through it.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

func (h *logRecords) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

func recordAttr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// TestRefusalsRateLimited: a flood of refusals of two kinds makes a few
// INFO lines per kind and interval, and their counts add up to every
// refusal once the log is closed.
func TestRefusalsRateLimited(t *testing.T) {
	h := &logRecords{}
	r := newRefusals(slog.New(h))
	r.every = 50 * time.Millisecond
	const n = 20000
	start := time.Now()
	for i := range n {
		reason := "a"
		if i%2 == 1 {
			reason = "b"
		}
		r.note("gossip", reason, "127.0.0.2:1", "")
		if i%1000 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	elapsed := time.Since(start)
	r.close()
	r.note("gossip", "a", "", "") // after close: not logged
	recs := h.records()
	perKind := map[string]int64{}
	for _, rec := range recs {
		if rec.Level != slog.LevelInfo {
			t.Errorf("level %v", rec.Level)
		}
		perKind[recordAttr(rec, "reason").String()] += recordAttr(rec, "count").Int64()
	}
	if perKind["a"] != n/2 || perKind["b"] != n/2 {
		t.Errorf("counts %v, want %d each", perKind, n/2)
	}
	// Two kinds, each: a line at once, one per interval, one at close.
	if limit := 2 * (int((elapsed+r.every-1)/r.every) + 2); len(recs) > limit {
		t.Errorf("%d lines for %d refusals in %s, want at most %d", len(recs), n, elapsed, limit)
	}
	t.Logf("%d refusals in %s: %d lines", n, elapsed.Round(time.Millisecond), len(recs))
}
