package quorum

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Mono is a point on the boot-time monotonic clock.
//
// Leases are measured on CLOCK_BOOTTIME rather than Go's monotonic clock
// (CLOCK_MONOTONIC): it never jumps with wall-clock changes and, unlike
// CLOCK_MONOTONIC, it keeps counting while the machine is suspended, so a
// primary resumed from a suspend sees its lease as expired.
type Mono time.Duration

// Now reads the boot-time clock.
func Now() Mono {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists on every Linux since 2.6.39; if it is
		// missing the process cannot measure leases safely at all.
		panic("quorum: CLOCK_BOOTTIME: " + err.Error())
	}
	return Mono(ts.Nano())
}

// Add returns m+d.
func (m Mono) Add(d time.Duration) Mono { return m + Mono(d) }

// Sub returns m−o.
func (m Mono) Sub(o Mono) time.Duration { return time.Duration(m - o) }

// Since returns the time elapsed since m.
func Since(m Mono) time.Duration { return Now().Sub(m) }

// BootTimer fires at a point on the boot-time clock: a timerfd on
// CLOCK_BOOTTIME. Go's own timers run on CLOCK_MONOTONIC, which stands
// still while the machine is suspended, so a deadline on the lease clock
// kept by one of them would fire late by the length of a suspend; this one
// fires on time, at once on resume if the deadline passed meanwhile.
type BootTimer struct {
	f  *os.File
	rc syscall.RawConn // the descriptor, valid only until Close
	c  chan struct{}
}

// NewBootTimer makes a disarmed timer; Close releases it.
func NewBootTimer() (*BootTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd on CLOCK_BOOTTIME: %w", err)
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("timerfd on CLOCK_BOOTTIME: %w", err)
	}
	t := &BootTimer{f: f, rc: rc, c: make(chan struct{}, 1)}
	go t.run()
	return t, nil
}

// run turns expirations into ticks on C (the runtime's poller waits on the
// descriptor); it ends at Close.
func (t *BootTimer) run() {
	var b [8]byte
	for {
		if _, err := t.f.Read(b[:]); err != nil {
			return
		}
		select {
		case t.c <- struct{}{}:
		default: // a tick is already waiting
		}
	}
}

// C ticks once the armed deadline is reached. A tick left over from an
// earlier setting may arrive after Reset: a receiver re-reads the clock.
func (t *BootTimer) C() <-chan struct{} { return t.c }

// Reset arms the timer for at, replacing any earlier setting; a moment
// already past fires at once.
func (t *BootTimer) Reset(at Mono) error {
	at = max(at, 1) // 0 would disarm
	return t.set(unix.TFD_TIMER_ABSTIME, unix.ItimerSpec{Value: unix.NsecToTimespec(int64(at))})
}

// Stop disarms the timer.
func (t *BootTimer) Stop() error { return t.set(0, unix.ItimerSpec{}) }

func (t *BootTimer) set(flags int, spec unix.ItimerSpec) error {
	var serr error
	if err := t.rc.Control(func(fd uintptr) { serr = unix.TimerfdSettime(int(fd), flags, &spec, nil) }); err != nil {
		return err
	}
	return serr
}

// Close disarms the timer and releases it.
func (t *BootTimer) Close() error { return t.f.Close() }
