package quorum

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// logWriter turns the line-oriented logs of raft and memberlist into slog
// records, so one logger (and its fields) covers the whole daemon.
type logWriter struct {
	log   *slog.Logger
	level slog.Level
	// outsiders, when set, takes the lines about traffic refused before
	// it proved the cluster key (see outsiderLine) and logs them
	// rate-limited, instead of one ERROR per junk packet.
	outsiders *refusals
	// keys, when set, are the node's keys: a refusal of traffic that did
	// not decrypt names their IDs.
	keys *atomic.Pointer[keyRing]
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
		}
		if w.outsiders != nil {
			if port, reason, ok := outsiderLine(s); ok {
				if reason == "" {
					w.log.Debug(s)
				} else {
					if w.keys != nil {
						switch reason {
						case reasonUndecryptablePacket:
							reason = w.keys.Load().undecryptable("packet")
						case reasonUndecryptableStream:
							reason = w.keys.Load().undecryptable("message")
						}
					}
					w.outsiders.note(port, reason, lineFrom(s), lineText(s))
				}
				continue
			}
		}
		lvl := w.level
		switch {
		case strings.Contains(s, "failed to heartbeat"), strings.Contains(s, "failed to appendEntries"),
			strings.Contains(s, "failed to make requestVote"), strings.Contains(s, "failed to contact:"),
			strings.Contains(s, "failed to decode incoming command"):
			// Repeated every few milliseconds while a peer is down; the
			// membership and role changes already tell the story.
			lvl = slog.LevelDebug
		case strings.Contains(s, "[ERR]"), strings.Contains(s, "[ERROR]"):
			lvl = slog.LevelError
		case strings.Contains(s, "[WARN]"):
			lvl = slog.LevelWarn
		case strings.Contains(s, "[DEBUG]"), strings.Contains(s, "[TRACE]"):
			lvl = slog.LevelDebug
		}
		w.log.Log(context.Background(), lvl, s)
	}
	return len(p), nil
}

func hclogger(log *slog.Logger, name string) hclog.Logger {
	lvl := hclog.Warn
	if log.Enabled(context.Background(), slog.LevelDebug) {
		lvl = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:            name,
		Level:           lvl,
		Output:          logWriter{log: log, level: slog.LevelInfo},
		DisableTime:     true,
		IncludeLocation: false,
	})
}

var _ io.Writer = logWriter{}

// outsiderLine recognises memberlist's lines about traffic that failed
// before authentication: streams and packets that do not decrypt, or end
// before their message does. With encryption on, only key holders get
// past these, so the lines describe outsiders (or a node with a wrong
// key), and a flood makes one per connection or packet. An empty reason
// marks a follow-on line (the failed error reply to such a stream), kept
// at DEBUG.
func outsiderLine(s string) (port, reason string, ok bool) {
	switch {
	case strings.Contains(s, "Decrypt packet failed"):
		return "gossip-udp", reasonUndecryptablePacket, true
	case strings.Contains(s, "discarding packet with unacceptable label"):
		return "gossip-udp", "labelled gossip packet (fenced sends no labels)", true
	case strings.Contains(s, "failed to receive:") && strings.Contains(s, "decrypt"):
		return "gossip", reasonUndecryptableStream, true
	case strings.Contains(s, "Failed to send error:"), strings.Contains(s, gossipBudgetText):
		return "gossip", "", true
	case strings.Contains(s, "failed to receive:"), strings.Contains(s, "failed to receive and remove the stream label header"):
		return "gossip", "gossip message incomplete or unreadable", true
	case strings.Contains(s, "discarding stream with unacceptable label"):
		return "gossip", "labelled gossip stream (fenced sends no labels)", true
	}
	return "", "", false
}

// The reasons of gossip traffic that did not decrypt; with the node's keys
// known, logWriter names their IDs instead (keyRing.undecryptable).
const (
	reasonUndecryptablePacket = "gossip packet did not decrypt (no or wrong cluster key)"
	reasonUndecryptableStream = "gossip message did not decrypt (no or wrong cluster key)"
)

// lineFrom is the "from=host:port" memberlist puts in its lines, or "".
func lineFrom(s string) string {
	i := strings.LastIndex(s, "from=")
	if i < 0 {
		return ""
	}
	f, _, _ := strings.Cut(s[i+len("from="):], " ")
	return f
}

// lineText drops the timestamp and level memberlist's logger prefixes.
func lineText(s string) string {
	if i := strings.Index(s, "memberlist: "); i >= 0 {
		return s[i+len("memberlist: "):]
	}
	return s
}
