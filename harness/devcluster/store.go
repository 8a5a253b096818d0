package devcluster

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage/tokenstore"
)

// startStore runs the token-checking storage stand-in and makes every
// node's storage a writer that writes to it with the node's epoch (see
// tokenstore.WriteHooks).
func (c *Cluster) startStore(cfg *config.Config) error {
	port, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c.StoreLog = filepath.Join(c.Opts.Dir, "store.log")
	s, err := tokenstore.Start(addr, c.StoreLog)
	if err != nil {
		return err
	}
	c.Store = s
	lab := c.Opts.Lab
	if lab == "" {
		lab = filepath.Join(filepath.Dir(c.Opts.Bin), "fenced-lab")
	}
	bin, err := filepath.Abs(lab)
	if err != nil {
		return err
	}
	start, stop, monitor, err := tokenstore.WriteHooks(filepath.Join(c.Opts.Dir, "hooks"), bin, "http://"+addr+"/write")
	if err != nil {
		s.Close()
		return err
	}
	cfg.Storage.Hooks = config.Hooks{Start: start, Stop: stop, Monitor: monitor}
	cfg.Storage.MonitorInterval = config.Duration(cfg.Timing.Heartbeat.D() * 2)
	return nil
}

// StoreEntries reads the store's log: every write attempt with node, epoch
// and result.
func (c *Cluster) StoreEntries() ([]tokenstore.Entry, error) {
	return tokenstore.ReadLog(c.StoreLog)
}

// WaitWrite waits until node had a write accepted by the store under epoch
// and returns when that write happened.
func (c *Cluster) WaitWrite(ctx context.Context, node string, epoch uint64) (time.Time, error) {
	for {
		entries, _ := c.StoreEntries()
		for _, e := range entries {
			if e.Node == node && e.Epoch == epoch && e.Result == tokenstore.Accepted {
				return e.Time, nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no write accepted from %s with epoch %d: %w", node, epoch, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
