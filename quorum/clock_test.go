package quorum

import (
	"testing"
	"time"
)

// TestBootTimer: the timer fires at its deadline on the boot-time clock, not
// before; a deadline already past fires at once; Reset replaces the
// setting; Stop disarms it.
func TestBootTimer(t *testing.T) {
	bt, err := NewBootTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Close()
	quiet := func(d time.Duration) bool {
		select {
		case <-bt.C():
			return false
		case <-time.After(d):
			return true
		}
	}
	at := Now().Add(100 * time.Millisecond)
	if err := bt.Reset(at); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bt.C():
		if now := Now(); now < at {
			t.Fatalf("fired %s before its deadline", at.Sub(now))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not fire")
	}
	if err := bt.Reset(Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if quiet(5 * time.Second) {
		t.Fatal("a deadline in the past did not fire at once")
	}
	// Reset replaces: an early deadline moved later does not fire early.
	bt.Reset(Now().Add(50 * time.Millisecond))
	bt.Reset(Now().Add(time.Hour))
	if !quiet(300 * time.Millisecond) {
		t.Fatal("fired at the replaced deadline")
	}
	bt.Reset(Now().Add(50 * time.Millisecond))
	if err := bt.Stop(); err != nil {
		t.Fatal(err)
	}
	if !quiet(300 * time.Millisecond) {
		t.Fatal("fired after Stop")
	}
	bt.Close()
	if err := bt.Reset(Now()); err == nil {
		t.Fatal("Reset after Close: no error")
	}
}
