// Package watchdog drives a Linux watchdog device (/dev/watchdog): opening
// it arms the hardware timer, every write feeds it, and the magic close
// (writing 'V', then closing) disarms it. A node that stops feeding it is
// reset when the timer runs out, whatever its software is doing.
//
// fenced arms the watchdog while the node may hold the storage and feeds it
// only while its lease is valid, so the node is reset at most Timeout after
// its lease ended; a successor may then count on that (the watchdog fence
// level). The timeout is set with WDIOC_SETTIMEOUT where the device takes it
// and read back with WDIOC_GETTIMEOUT, so what is advertised is what the
// hardware will do. A device that takes no ioctls (a stand-in for tests: a
// FIFO read by a process that acts as the timer) keeps the configured
// timeout.
package watchdog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Device is an armed watchdog. It is safe for concurrent use.
type Device struct {
	path string

	mu      sync.Mutex
	f       *os.File
	timeout time.Duration
}

// Arm opens the device at path, which arms it, sets its timeout to timeout
// where the device takes the setting (0 keeps the device's own), and feeds
// it once. It returns the timeout the device will use; 0 means it could not
// be learned (a device without ioctls and no timeout configured).
func Arm(path string, timeout time.Duration) (*Device, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("watchdog %s: %w", path, err)
	}
	d := &Device{path: path, f: f, timeout: timeout}
	fd := int(f.Fd())
	if timeout > 0 {
		secs := int((timeout + time.Second - 1) / time.Second)
		if err := unix.IoctlSetPointerInt(fd, unix.WDIOC_SETTIMEOUT, secs); err != nil && !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
			d.abandon()
			return nil, fmt.Errorf("watchdog %s: setting the timeout to %ds: %w", path, secs, err)
		}
	}
	if secs, err := unix.IoctlGetInt(fd, unix.WDIOC_GETTIMEOUT); err == nil && secs > 0 {
		d.timeout = time.Duration(secs) * time.Second
	}
	if err := d.Pet(); err != nil {
		d.abandon()
		return nil, err
	}
	return d, nil
}

// Timeout is how long after the last feed the device resets the node.
func (d *Device) Timeout() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.timeout
}

// Pet feeds the watchdog.
func (d *Device) Pet() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return fmt.Errorf("watchdog %s: not armed", d.path)
	}
	if _, err := d.f.Write([]byte{'.'}); err != nil {
		return fmt.Errorf("watchdog %s: feeding: %w", d.path, err)
	}
	return nil
}

// Disarm stops the watchdog with the magic close: the node may be reset no
// more. Called only once nothing the node held runs any more.
func (d *Device) Disarm() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil
	}
	_, err := d.f.Write([]byte{'V'})
	err = errors.Join(err, d.f.Close())
	d.f = nil
	if err != nil {
		return fmt.Errorf("watchdog %s: disarming: %w", d.path, err)
	}
	return nil
}

// abandon closes without the magic close: an armed watchdog then fires.
func (d *Device) abandon() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
}

// Abandon stops feeding for good and lets the watchdog fire (self-fence).
func (d *Device) Abandon() { d.abandon() }
