package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// dataDirLock is the lock a daemon holds on its data directory for as
// long as it runs: two daemons on one raft log would both vote with it,
// which raft's safety does not survive. The raft log's own lock (bbolt's)
// would also refuse the second, but only after a timeout and as
// "timeout"; this one is taken first, at once, and names the holder.
type dataDirLock struct {
	f    *os.File
	once sync.Once
}

// lockFileName is the file in data_dir the lock is held on.
const lockFileName = "fenced.lock"

// lockDataDir creates dir if needed and locks it. When another process
// holds it, the error says which (by its PID, from the kernel's table of
// locks, else from what the holder wrote into the file).
func lockDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data_dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data_dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "another process"
			if pid := lockHolder(f); pid > 0 {
				holder = "PID " + strconv.Itoa(pid)
				if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
					holder += " (" + strings.TrimSpace(string(comm)) + ")"
				}
			}
			return nil, fmt.Errorf("data_dir %s is locked by %s: another fenced runs on it; stop that one, or give this one a data_dir of its own", dir, holder)
		}
		return nil, fmt.Errorf("data_dir %s: lock %s: %w", dir, path, err)
	}
	// For whoever finds the lock held and cannot read the kernel's table.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dataDirLock{f: f}, nil
}

// release gives the lock up (once; nil does nothing).
func (l *dataDirLock) release() {
	if l == nil {
		return
	}
	l.once.Do(func() { l.f.Close() })
}

// lockHolder is the PID holding a flock on f's file: /proc/locks lists
// each lock with its PID and the device and inode of its file. 0 when
// unknown; then what the holder wrote into the file.
func lockHolder(f *os.File) int {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	if locks, err := os.Open("/proc/locks"); err == nil {
		defer locks.Close()
		// "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF": the device
		// is major:minor in hexadecimal.
		want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
		sc := bufio.NewScanner(locks)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 6 && fields[1] == "FLOCK" && fields[5] == want {
				if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
					return pid
				}
			}
		}
	}
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return pid
}
