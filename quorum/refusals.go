package quorum

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// refusalEvery is how often at most one line is logged per kind of
// refusal. A flood refuses thousands of connections or packets a second;
// the admin needs to know that it happens, what is refused, from where and
// how much, not one line per packet.
var refusalEvery = 10 * time.Second

// refusals logs what a node refuses from outside the cluster (connections
// over the limits, failed handshakes, junk frames) at INFO, rate-limited
// per kind: the first refusal of a kind is logged at once; later ones
// within refusalEvery are counted and reported in one line when the
// interval ends. Safe for concurrent use; a nil *refusals logs nothing.
type refusals struct {
	log   *slog.Logger
	every time.Duration

	mu     sync.Mutex
	kinds  map[refusalKey]*refusalCount
	closed bool
}

// refusalKey is one kind of refusal: where (raft, gossip, gossip-udp) and
// why, in a few stable words.
type refusalKey struct{ port, reason string }

type refusalCount struct {
	last       time.Time // when the last line of this kind was logged
	suppressed int       // refusals since then, not logged yet
	from       string    // the source of the latest of them
	detail     string
	flush      *time.Timer // logs the suppressed ones at last+every
}

func newRefusals(log *slog.Logger) *refusals {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &refusals{log: log, every: refusalEvery, kinds: map[refusalKey]*refusalCount{}}
}

// note records one refusal on port for reason, from (a source address,
// may be empty); detail (may be empty) is the error or the library's line.
func (r *refusals) note(port, reason, from, detail string) {
	if r == nil {
		return
	}
	k := refusalKey{port, reason}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	c := r.kinds[k]
	if c == nil {
		c = &refusalCount{}
		r.kinds[k] = c
	}
	if !c.last.IsZero() && now.Sub(c.last) < r.every {
		c.suppressed++
		c.from, c.detail = from, detail
		if c.flush == nil {
			c.flush = time.AfterFunc(c.last.Add(r.every).Sub(now), func() { r.flush(k) })
		}
		return
	}
	// A first refusal, or one after a quiet interval (or just before
	// the flush timer ran: it then finds nothing to log).
	var since time.Duration
	if c.suppressed > 0 {
		since = now.Sub(c.last)
	}
	if c.flush != nil {
		c.flush.Stop()
	}
	r.emit(k, c.suppressed+1, from, detail, since)
	c.last, c.suppressed, c.flush = now, 0, nil
}

// flush logs the refusals of kind k counted since its last line.
func (r *refusals) flush(k refusalKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.kinds[k]
	if r.closed || c == nil || c.suppressed == 0 {
		return
	}
	now := time.Now()
	r.emit(k, c.suppressed, c.from, c.detail, now.Sub(c.last))
	c.last, c.suppressed, c.flush = now, 0, nil
}

// emit writes one line (under r.mu, which keeps the lines of a kind in
// order).
func (r *refusals) emit(k refusalKey, n int, from, detail string, since time.Duration) {
	attrs := []slog.Attr{slog.String("port", k.port), slog.String("reason", k.reason), slog.Int("count", n)}
	if since > 0 {
		// count covers the refusals since the previous line of this kind.
		attrs = append(attrs, slog.Duration("since_last", since.Round(time.Second)))
	}
	if from != "" {
		attrs = append(attrs, slog.String("from", from))
	}
	if detail != "" {
		attrs = append(attrs, slog.String("detail", detail))
	}
	r.log.LogAttrs(context.Background(), slog.LevelInfo, "refused traffic from outside the cluster", attrs...)
}

// close logs what is still counted and stops the timers; later refusals
// are not logged.
func (r *refusals) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	keys := make([]refusalKey, 0, len(r.kinds))
	for k, c := range r.kinds {
		if c.flush != nil {
			c.flush.Stop()
		}
		keys = append(keys, k)
	}
	r.mu.Unlock()
	for _, k := range keys {
		r.flush(k)
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}
