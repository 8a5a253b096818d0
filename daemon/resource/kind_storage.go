package resource

import (
	"context"
	"log/slog"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage"
)

// A filesystem mount and start/stop/monitor programs, each run through
// package storage as the storage shorthand is.
func init() {
	register(kind{
		name: "mount",
		build: func(_ context.Context, _ *config.Config, r config.Resource, node string, log *slog.Logger) (built, error) {
			return newStorage(config.Storage{Mount: r.Mount}, node, log)
		},
		defaultInterval: config.DefaultStorageMonitorInterval,
	})
	register(kind{
		name: "hooks",
		build: func(_ context.Context, _ *config.Config, r config.Resource, node string, log *slog.Logger) (built, error) {
			return newStorage(config.Storage{Hooks: *r.Hooks}, node, log)
		},
		defaultInterval: config.DefaultStorageMonitorInterval,
	})
}

func newStorage(cfg config.Storage, node string, log *slog.Logger) (built, error) {
	m, err := storage.New(cfg, node, log)
	if err != nil {
		return built{}, err
	}
	return built{m: storageMember{m}}, nil
}

// storageMember runs a mount or hooks through the storage package.
type storageMember struct{ m *storage.Manager }

func (s storageMember) start(ctx context.Context, tok token) error {
	return s.m.Start(ctx, tok.epoch, tok.previous)
}

func (s storageMember) stop(ctx context.Context, _ token) error { return s.m.Stop(ctx) }

func (s storageMember) check(ctx context.Context, _ token, interval time.Duration) (bool, error) {
	if interval == 0 {
		return s.m.Running(ctx)
	}
	if err := s.m.Monitor(ctx); err != nil {
		return false, err
	}
	return true, nil
}
