// Package logring keeps the daemon's most recent log lines in memory,
// bounded in bytes, for the diagnostics bundle (fencectl report) of a
// daemon that runs without a journal to ask.
package logring

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultSize is the ring's bound when New is given none: about a day of
// an idle daemon's lines at info level, an hour or so of a busy one.
const DefaultSize = 1 << 20

// Ring holds log lines, oldest first, at most max bytes of them. It is
// safe for concurrent use.
type Ring struct {
	mu    sync.Mutex
	max   int
	size  int
	lines []entry
	// at is the time of the record being written (Handle holds mu
	// while the text handler writes it).
	at time.Time
	// dropped counts lines pushed out, and lastDropped is the time of
	// the newest of them: a reader learns whether its period starts
	// before what the ring still holds.
	dropped     int
	lastDropped time.Time
}

type entry struct {
	at   time.Time
	line []byte
}

// New returns a ring of at most maxBytes of lines (DefaultSize if <= 0).
func New(maxBytes int) *Ring {
	if maxBytes <= 0 {
		maxBytes = DefaultSize
	}
	return &Ring{max: maxBytes}
}

// Handler returns a slog handler that writes key=value lines (with their
// time, whatever the stderr handler does) into the ring; opts as for
// slog.NewTextHandler.
func (r *Ring) Handler(opts *slog.HandlerOptions) slog.Handler {
	return &handler{r: r, h: slog.NewTextHandler(ringWriter{r}, opts)}
}

// Since returns the lines logged at or after t, oldest first, and whether
// lines of that period were already pushed out of the ring.
func (r *Ring) Since(t time.Time) (text []byte, cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b bytes.Buffer
	for _, e := range r.lines {
		if !e.at.Before(t) {
			b.Write(e.line)
		}
	}
	return b.Bytes(), r.dropped > 0 && !r.lastDropped.Before(t)
}

// Size is the bound of the ring in bytes.
func (r *Ring) Size() int { return r.max }

// add appends one line; r.mu is held.
func (r *Ring) add(p []byte) {
	if len(p) > r.max {
		p = p[len(p)-r.max:]
	}
	r.lines = append(r.lines, entry{at: r.at, line: bytes.Clone(p)})
	r.size += len(p)
	for r.size > r.max {
		old := r.lines[0]
		r.lines[0] = entry{}
		r.lines = r.lines[1:]
		r.size -= len(old.line)
		r.dropped++
		r.lastDropped = old.at
	}
}

// ringWriter is the text handler's output: one Write per record, always
// from handler.Handle, which holds the ring's lock.
type ringWriter struct{ r *Ring }

func (w ringWriter) Write(p []byte) (int, error) {
	w.r.add(p)
	return len(p), nil
}

type handler struct {
	r *Ring
	h slog.Handler
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.at = rec.Time
	if h.r.at.IsZero() {
		h.r.at = time.Now()
	}
	return h.h.Handle(ctx, rec)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{r: h.r, h: h.h.WithAttrs(as)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{r: h.r, h: h.h.WithGroup(name)}
}
