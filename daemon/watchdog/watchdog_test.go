package watchdog

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestArmFeedDisarmOnAFIFO: the device is opened and written through the
// same calls as /dev/watchdog; a FIFO refuses the timeout ioctls, so the
// configured timeout stands; feeding writes a byte; Disarm is the magic
// close; Abandon closes without it.
func TestArmFeedDisarmOnAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wd")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := Arm(path, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d.Timeout() != 7*time.Second {
		t.Fatalf("timeout %s", d.Timeout())
	}
	if err := d.Pet(); err != nil {
		t.Fatal(err)
	}
	if err := d.Disarm(); err != nil {
		t.Fatal(err)
	}
	if err := d.Pet(); err == nil {
		t.Fatal("fed after the magic close")
	}
	buf := make([]byte, 16)
	n, _ := r.Read(buf)
	if got := string(buf[:n]); got != "..V" {
		t.Fatalf("device saw %q, want two feeds then the magic close", got)
	}

	d, err = Arm(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Timeout() != 0 {
		t.Fatalf("a device without ioctls and no timeout configured reports %s", d.Timeout())
	}
	d.Abandon()
	n, _ = r.Read(buf)
	if got := string(buf[:n]); got != "." {
		t.Fatalf("abandoning wrote %q: it must close without the magic character", got)
	}
}

func TestArmMissingDevice(t *testing.T) {
	if _, err := Arm(filepath.Join(t.TempDir(), "none"), time.Second); err == nil {
		t.Fatal("armed a missing device")
	}
}

// TestKeeps: a watchdog is trusted to reset a node whose daemon died only
// with magic close or nowayout; a device that answers no watchdog ioctls
// (the FIFO) cannot be told, so it is not.
func TestKeeps(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want bool
		why  string
	}{
		{Options{Known: true, MagicClose: true}, true, "magic close"},
		{Options{Known: true}, false, "no magic close and nowayout is off"},
		{Options{Known: true, NoWayOutKnown: true, NoWayOut: true}, true, "nowayout is set"},
		{Options{NoWayOutKnown: true}, false, "answers no watchdog ioctls"},
		{Options{}, false, "answers no watchdog ioctls"},
	} {
		got, why := Keeps(c.o)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("Keeps(%+v) = %v, %q; want %v, …%s…", c.o, got, why, c.want, c.why)
		}
	}
	path := filepath.Join(t.TempDir(), "wd")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := Arm(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Disarm()
	if keeps, why := d.Keeps(); keeps || !strings.Contains(why, "answers no watchdog ioctls") {
		t.Fatalf("a FIFO: keeps %v, %q", keeps, why)
	}
}
