package nemesis

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// disk is the shared storage: an ext4 filesystem on a loop device. All
// machines share one kernel, so each mounting it in its own mount namespace
// is a real shared disk (the kernel even shares one superblock between the
// mounts, as a cluster filesystem would not: what protects the data is
// only that one node at a time writes it).
type disk struct {
	image  string
	Device string
}

func newDisk(image string, sizeMB int) (*disk, error) {
	f, err := os.Create(image)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(int64(sizeMB) << 20)
	f.Close()
	if err != nil {
		return nil, err
	}
	if err := run("mkfs.ext4", "-q", "-F", "-L", "nemesis", image); err != nil {
		return nil, err
	}
	out, err := exec.Command("losetup", "--find", "--show", image).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup %s: %v: %s", image, err, strings.TrimSpace(string(out)))
	}
	return &disk{image: image, Device: strings.TrimSpace(string(out))}, nil
}

// waitUnmounted waits until no mount namespace holds the filesystem: a
// mounted block device cannot be opened exclusively.
func (d *disk) waitUnmounted(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		fd, err := unix.Open(d.Device, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("%s still in use after %v: %w", d.Device, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fsck runs `e2fsck -fn`: a full check that changes nothing. It returns the
// report and whether the filesystem is clean (exit status 0).
func (d *disk) fsck() (string, bool) {
	out, err := exec.Command("e2fsck", "-fn", d.Device).CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// readFile reads a file of the unmounted filesystem without mounting it.
func (d *disk) readFile(name string) ([]byte, error) {
	cmd := exec.Command("debugfs", "-R", "cat /"+name, d.Device)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("debugfs cat %s: %v: %s", name, err, stderr.String())
	}
	return out, nil
}

func (d *disk) Close() {
	if d.Device != "" {
		run("losetup", "-d", d.Device)
	}
	os.Remove(d.image)
}
