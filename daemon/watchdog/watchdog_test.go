package watchdog

import (
	"os"
	"path/filepath"
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
