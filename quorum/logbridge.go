package quorum

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// logWriter turns the line-oriented logs of raft and memberlist into slog
// records, so one logger (and its fields) covers the whole daemon.
type logWriter struct {
	log   *slog.Logger
	level slog.Level
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
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
