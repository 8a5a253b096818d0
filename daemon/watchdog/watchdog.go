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
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Device is an armed watchdog. It is safe for concurrent use.
type Device struct {
	path string
	// keeps and why: whether the timer keeps counting once the device is
	// closed without the magic character (see Keeps).
	keeps bool
	why   string

	mu      sync.Mutex
	f       *os.File
	timeout time.Duration
	halted  bool // Halt: never fed again, left open
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
	var opts Options
	if info, err := unix.IoctlGetWatchdogInfo(fd); err == nil {
		opts.Known, opts.MagicClose = true, info.Options&unix.WDIOF_MAGICCLOSE != 0
	} else if so, ok := standInOptions(); ok && (errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL)) {
		opts = so
	}
	if !opts.NoWayOutKnown {
		opts.NoWayOut, opts.NoWayOutKnown = nowayout(f)
	}
	d.keeps, d.why = Keeps(opts)
	if err := d.Pet(); err != nil {
		d.abandon()
		return nil, err
	}
	return d, nil
}

// Options are what is known of a device's behaviour at close.
type Options struct {
	// Known: the driver answered WDIOC_GETSUPPORT; MagicClose is its
	// WDIOF_MAGICCLOSE.
	Known, MagicClose bool
	// NoWayOutKnown: the kernel says whether nowayout is set (sysfs).
	NoWayOutKnown, NoWayOut bool
}

// Keeps decides whether an armed watchdog keeps counting after the
// process that armed it dies, and says why in words for status and logs.
func Keeps(o Options) (bool, string) {
	switch {
	case o.NoWayOutKnown && o.NoWayOut:
		return true, "nowayout is set: nothing stops the timer once armed"
	case o.Known && o.MagicClose:
		return true, "the driver has magic close: only the magic character stops the timer"
	case o.Known:
		return false, "the driver has no magic close and nowayout is off: the daemon's exit (a kill, the OOM killer) stops the timer, so a dead daemon leaves the node running; boot with the driver's nowayout=1 to use the watchdog fence level"
	}
	return false, "the device answers no watchdog ioctls: whether it keeps counting after the daemon exits cannot be told"
}

// Keeps reports whether the timer keeps counting after the device is
// closed without the magic character (the daemon killed), and why.
func (d *Device) Keeps() (bool, string) { return d.keeps, d.why }

// nowayout reads the kernel's nowayout for the watchdog f is (its sysfs
// class entry); ok is false when it cannot be told.
func nowayout(f *os.File) (set, ok bool) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return false, false
	}
	maj, min := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
	dir := ""
	if maj == 10 && min == 130 {
		// /dev/watchdog, the legacy misc device: the first watchdog's.
		dir = "/sys/class/watchdog/watchdog0"
	} else {
		entries, _ := os.ReadDir("/sys/class/watchdog")
		want := fmt.Sprintf("%d:%d", maj, min)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join("/sys/class/watchdog", e.Name(), "dev"))
			if err == nil && strings.TrimSpace(string(b)) == want {
				dir = filepath.Join("/sys/class/watchdog", e.Name())
			}
		}
	}
	if dir == "" {
		return false, false
	}
	b, err := os.ReadFile(filepath.Join(dir, "nowayout"))
	if err != nil {
		return false, false
	}
	return strings.TrimSpace(string(b)) == "1", true
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
	if d.halted {
		return fmt.Errorf("watchdog %s: halted for a self-fence", d.path)
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

// Abandon closes the device without the magic character. A driver with
// magic close (or nowayout) keeps counting and fires; one without stops.
func (d *Device) Abandon() { d.abandon() }

// Halt stops feeding for good and leaves the device open, so that it fires
// whatever the driver does at close (self-fence). Disarm still works.
func (d *Device) Halt() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.halted = true
}
