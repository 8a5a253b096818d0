package devcluster

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// StandInWatchdog stands for a node's watchdog device, which this machine
// lacks (no /dev/watchdog, no softdog): a FIFO at Path that the daemon opens
// and writes through the same code as a real device (package
// daemon/watchdog; the FIFO refuses the timeout ioctls, so the configured
// timeout stands). A goroutine of this process plays the hardware timer:
// every byte feeds it, 'V' (the magic close) disarms it, and when no feed
// arrives within Timeout of the last one it fires: Fire runs (it kills the
// node's processes) and the time is recorded.
type StandInWatchdog struct {
	Path    string
	Timeout time.Duration
	Fire    func()

	mu      sync.Mutex
	armed   bool
	last    time.Time
	fired   time.Time
	r       *os.File
	stop    chan struct{}
	stopped sync.WaitGroup
}

// NewStandInWatchdog makes the FIFO and starts the timer.
func NewStandInWatchdog(path string, timeout time.Duration, fire func()) (*StandInWatchdog, error) {
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("stand-in watchdog %s: %w", path, err)
	}
	// Read-write, so that opening does not wait for the daemon and its
	// closing gives no end of file: a real watchdog does not notice a
	// close without the magic character either.
	r, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("stand-in watchdog %s: %w", path, err)
	}
	w := &StandInWatchdog{Path: path, Timeout: timeout, Fire: fire, r: r, stop: make(chan struct{})}
	w.stopped.Add(2)
	go w.read()
	go w.timer()
	return w, nil
}

func (w *StandInWatchdog) read() {
	defer w.stopped.Done()
	buf := make([]byte, 64)
	for {
		n, err := w.r.Read(buf)
		now := time.Now()
		w.mu.Lock()
		for _, b := range buf[:n] {
			if b == 'V' {
				w.armed = false
			} else if w.fired.IsZero() {
				w.armed, w.last = true, now
			}
		}
		w.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (w *StandInWatchdog) timer() {
	defer w.stopped.Done()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		due := w.armed && w.fired.IsZero() && time.Since(w.last) >= w.Timeout
		if due {
			w.fired, w.armed = time.Now(), false
		}
		w.mu.Unlock()
		if due && w.Fire != nil {
			w.Fire()
		}
	}
}

// Armed reports whether the watchdog is armed (fed since its last magic
// close) and not fired.
func (w *StandInWatchdog) Armed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.armed
}

// Fired returns when it fired (zero: never).
func (w *StandInWatchdog) Fired() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// Close stops the timer and removes the FIFO.
func (w *StandInWatchdog) Close() error {
	select {
	case <-w.stop:
		return nil
	default:
	}
	close(w.stop)
	err := w.r.Close()
	w.stopped.Wait()
	return errors.Join(err, os.Remove(w.Path))
}
