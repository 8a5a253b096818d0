// Package storage is the resource manager: it mounts the shared storage
// and runs the start, stop and monitor hooks on the primary, always handing
// them the epoch as the fencing token (FENCED_EPOCH) so storage that
// understands tokens can reject a stale writer.
//
// Hooks run with the daemon's environment plus FENCED_ACTION (start, stop,
// monitor), FENCED_EPOCH, FENCED_NODE, FENCED_PREVIOUS_HOLDER and, with a
// mount, FENCED_MOUNTPOINT and FENCED_DEVICE; in / as working directory;
// in their own process group, killed as a group when the daemon's deadline
// passes. A non-zero exit is an error carrying the end of their output.
//
// Manager implements the daemon's Resource interface. Start mounts, then
// runs the start hook; Stop runs the stop hook, then unmounts. Both are
// idempotent, and Stop is safe after a partial Start: the daemon calls it
// whenever a Start failed or the node demotes. A Stop that cannot finish
// (the stop hook fails, the filesystem stays busy) returns an error, and the
// daemon then self-fences: there is no lazy unmount, because a detached
// mount still writes with the old token.
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenced/fenced/daemon/config"
)

// Manager runs the configured storage for one node.
type Manager struct {
	node  string
	mount *config.Mount
	flags uintptr
	data  string
	bind  bool
	hooks config.Hooks
	log   *slog.Logger

	// MountInfo is the mount table read by the checks; tests may point it
	// elsewhere.
	MountInfo string
	// BusyRetry is the pause between unmount tries while the filesystem
	// is busy (processes the stop hook ended may still be exiting).
	BusyRetry time.Duration
	// OutputLimit bounds the hook output kept in an error.
	OutputLimit int

	mu       sync.Mutex // one operation at a time
	epoch    uint64
	previous string
}

// New checks cfg and returns its manager for node; it changes nothing yet.
func New(cfg config.Storage, node string, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		node: node, hooks: cfg.Hooks, log: log.With("component", "storage"),
		MountInfo: "/proc/self/mountinfo", BusyRetry: 100 * time.Millisecond, OutputLimit: 4 << 10,
	}
	var errs []error
	if node == "" {
		errs = append(errs, errors.New("storage: node name empty"))
	}
	if mt := cfg.Mount; mt != nil {
		cp := *mt
		m.mount = &cp
		flags, data, err := parseOptions(mt.Options)
		if err != nil {
			errs = append(errs, fmt.Errorf("storage.mount.options: %w", err))
		}
		m.flags, m.data, m.bind = flags, data, flags&unix.MS_BIND != 0
		if mt.Device == "" {
			errs = append(errs, errors.New("storage.mount.device: required"))
		}
		if !filepath.IsAbs(mt.Mountpoint) {
			errs = append(errs, fmt.Errorf("storage.mount.mountpoint: %q is not an absolute path", mt.Mountpoint))
		}
		if mt.FSType == "" && !m.bind {
			errs = append(errs, errors.New("storage.mount.fstype: required (except for bind mounts)"))
		}
	}
	for _, h := range []struct{ name, path string }{{"start", cfg.Hooks.Start}, {"stop", cfg.Hooks.Stop}, {"monitor", cfg.Hooks.Monitor}} {
		if h.path == "" {
			continue
		}
		if err := checkExecutable(h.path); err != nil {
			errs = append(errs, fmt.Errorf("storage.hooks.%s: %w", h.name, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

func checkExecutable(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q is not an absolute path", path)
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// Start mounts the storage (if not already mounted by us), then runs the
// start hook with epoch as the fencing token and previous as the node that
// held the storage before.
func (m *Manager) Start(ctx context.Context, epoch uint64, previous string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch, m.previous = epoch, previous
	log := m.log.With("epoch", epoch)
	if m.mount != nil {
		if err := m.mountFS(); err != nil {
			return err
		}
		log.Info("storage mounted", "device", m.mount.Device, "mountpoint", m.mount.Mountpoint)
	}
	if err := m.runHook(ctx, "start", m.hooks.Start); err != nil {
		return err
	}
	return nil
}

// Stop runs the stop hook, then unmounts. Both run even when the first
// fails; any error means the storage may still be in use.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if err := m.runHook(ctx, "stop", m.hooks.Stop); err != nil {
		errs = append(errs, err)
	}
	if m.mount != nil {
		if err := m.unmountFS(ctx); err != nil {
			errs = append(errs, err)
		} else {
			m.log.Info("storage unmounted", "mountpoint", m.mount.Mountpoint, "epoch", m.epoch)
		}
	}
	return errors.Join(errs...)
}

// Monitor checks the mount is still in place and runs the monitor hook.
func (m *Manager) Monitor(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mount != nil {
		ours, other, err := m.mounted()
		if err != nil {
			return err
		}
		if !ours {
			if other != "" {
				return fmt.Errorf("storage: %s: %s is mounted there instead of %s", m.mount.Mountpoint, other, m.mount.Device)
			}
			return fmt.Errorf("storage: %s: %s is no longer mounted", m.mount.Mountpoint, m.mount.Device)
		}
	}
	return m.runHook(ctx, "monitor", m.hooks.Monitor)
}

// hidden describes where our device is mounted other than on top of our
// mountpoint: beneath something mounted over it, or somewhere else ("" if
// nowhere). Every entry of the table counts, not only what shows at the
// mountpoint: a filesystem mounted over ours hides it from a check of the
// top alone, and a stop that returned then would leave it mounted.
func (m *Manager) hidden() (string, error) {
	entries, err := readMountinfo(m.MountInfo)
	if err != nil {
		return "", fmt.Errorf("storage: reading the mount table: %w", err)
	}
	if m.bind {
		// A bind mount's table entry names the underlying device, not the
		// source directory: only what shows at the mountpoint can be told.
		return "", nil
	}
	mp := canonical(m.mount.Mountpoint)
	top, _ := topMount(entries, mp)
	var where []string
	for _, e := range entries {
		if !m.ourSource(e) {
			continue
		}
		if e.mountpoint == mp {
			where = append(where, fmt.Sprintf("%s beneath %s (%s)", mp, top.source, top.fstype))
		} else {
			where = append(where, e.mountpoint)
		}
	}
	return strings.Join(where, ", "), nil
}

// ourSource reports whether e is our device (the same type, if one is
// configured).
func (m *Manager) ourSource(e mountEntry) bool {
	sameSource := e.source == m.mount.Device || canonical(e.source) == canonical(m.mount.Device)
	return sameSource && (m.mount.FSType == "" || e.fstype == m.mount.FSType)
}

// mounted reports whether our device is what is mounted at the
// mountpoint; other describes a foreign mount found there instead.
func (m *Manager) mounted() (ours bool, other string, err error) {
	entries, err := readMountinfo(m.MountInfo)
	if err != nil {
		return false, "", fmt.Errorf("storage: reading the mount table: %w", err)
	}
	e, ok := topMount(entries, canonical(m.mount.Mountpoint))
	if !ok {
		return false, "", nil
	}
	sameSource := e.source == m.mount.Device || canonical(e.source) == canonical(m.mount.Device)
	// A bind mount shows the filesystem type and device of what it binds.
	sameType := m.bind || m.mount.FSType == "" || e.fstype == m.mount.FSType
	if sameSource && sameType || m.bind && m.bindMatches() {
		return true, "", nil
	}
	return false, fmt.Sprintf("%s (%s)", e.source, e.fstype), nil
}

// bindMatches is the weak check possible for bind mounts, whose mountinfo
// source is the underlying device: the mountpoint shows the same inode as
// the configured source directory.
func (m *Manager) bindMatches() bool {
	var a, b unix.Stat_t
	if unix.Stat(m.mount.Device, &a) != nil || unix.Stat(m.mount.Mountpoint, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// mountFS mounts the storage unless it is already mounted by us. mount(2)
// cannot be cancelled: a hung device blocks here, and the daemon's deadline
// for the takeover applies around it.
func (m *Manager) mountFS() error {
	mt := m.mount
	ours, other, err := m.mounted()
	if err != nil {
		return err
	}
	if ours {
		m.log.Info("storage already mounted", "mountpoint", mt.Mountpoint)
		return nil
	}
	if other != "" {
		return fmt.Errorf("storage: mount %s on %s: %s is already mounted there; refusing to mount over it", mt.Device, mt.Mountpoint, other)
	}
	if err := os.MkdirAll(mt.Mountpoint, 0o755); err != nil {
		return fmt.Errorf("storage: mountpoint %s: %w", mt.Mountpoint, err)
	}
	if err := unix.Mount(mt.Device, mt.Mountpoint, mt.FSType, m.flags, m.data); err != nil {
		return fmt.Errorf("storage: mount %s on %s (type %s, options %q): %w", mt.Device, mt.Mountpoint, mt.FSType, mt.Options, err)
	}
	if m.bind && m.flags&unix.MS_RDONLY != 0 {
		// A bind mount ignores MS_RDONLY on the first call; it takes a remount.
		if err := unix.Mount("", mt.Mountpoint, "", m.flags|unix.MS_REMOUNT, ""); err != nil {
			return fmt.Errorf("storage: remount %s read-only: %w", mt.Mountpoint, err)
		}
	}
	return nil
}

// unmountFS unmounts our mount, retrying while the filesystem is busy until
// ctx ends. Not mounted anywhere is success; our device still mounted
// beneath another filesystem, or elsewhere, is a failed stop.
func (m *Manager) unmountFS(ctx context.Context) error {
	mt := m.mount
	for try := 1; ; try++ {
		ours, other, err := m.mounted()
		if err != nil {
			return err
		}
		if !ours {
			where, err := m.hidden()
			if err != nil {
				return err
			}
			if where != "" {
				return fmt.Errorf("storage: %s is still mounted at %s: it cannot be unmounted without removing what is mounted over it or elsewhere, so it is not stopped", mt.Device, where)
			}
			if other != "" {
				m.log.Warn("storage: something else is mounted on the mountpoint; leaving it", "mountpoint", mt.Mountpoint, "found", other)
			}
			return nil
		}
		err = unix.Unmount(mt.Mountpoint, 0)
		if err == nil {
			continue // check again: the same device may be stacked there twice
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("storage: unmount %s: %w", mt.Mountpoint, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("storage: unmount %s: still busy after %d tries: %w (%v)", mt.Mountpoint, try, err, ctx.Err())
		case <-time.After(m.BusyRetry):
		}
	}
}

// env is the hook environment: the daemon's, plus the token and names.
func (m *Manager) env(action string) []string {
	env := append(os.Environ(),
		"FENCED_ACTION="+action,
		"FENCED_EPOCH="+strconv.FormatUint(m.epoch, 10),
		"FENCED_NODE="+m.node,
		"FENCED_PREVIOUS_HOLDER="+m.previous,
	)
	if m.mount != nil {
		env = append(env, "FENCED_MOUNTPOINT="+m.mount.Mountpoint, "FENCED_DEVICE="+m.mount.Device)
	}
	return env
}
