package storage

import "context"

// Running reports whether the storage runs on this node, for a probe on a
// node that is not primary (e.g. one that restarted while it held the
// storage): our device is mounted — at the mountpoint, beneath something
// mounted over it, or elsewhere — or the monitor hook exits 0. Without a mount, a hook that fails is read as "not running", and
// without a monitor hook there is nothing to ask: false.
func (m *Manager) Running(ctx context.Context) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mount != nil {
		ours, _, err := m.mounted()
		if err != nil {
			return false, err
		}
		if ours {
			return true, nil
		}
		// Mounted beneath something else, or elsewhere: it runs here.
		if where, err := m.hidden(); err != nil || where != "" {
			return where != "", err
		}
	}
	if m.hooks.Monitor == "" {
		return false, nil
	}
	return m.runHook(ctx, "monitor", m.hooks.Monitor) == nil, nil
}
