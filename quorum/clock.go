package quorum

import (
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
