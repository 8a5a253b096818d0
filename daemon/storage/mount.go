package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountFlags maps mount(8) options to mount(2) flags: set or, for the
// negative forms, cleared.
var mountFlags = map[string]struct {
	flag  uintptr
	clear bool
}{
	"ro":          {unix.MS_RDONLY, false},
	"rw":          {unix.MS_RDONLY, true},
	"nosuid":      {unix.MS_NOSUID, false},
	"suid":        {unix.MS_NOSUID, true},
	"nodev":       {unix.MS_NODEV, false},
	"dev":         {unix.MS_NODEV, true},
	"noexec":      {unix.MS_NOEXEC, false},
	"exec":        {unix.MS_NOEXEC, true},
	"sync":        {unix.MS_SYNCHRONOUS, false},
	"async":       {unix.MS_SYNCHRONOUS, true},
	"dirsync":     {unix.MS_DIRSYNC, false},
	"noatime":     {unix.MS_NOATIME, false},
	"atime":       {unix.MS_NOATIME, true},
	"nodiratime":  {unix.MS_NODIRATIME, false},
	"diratime":    {unix.MS_NODIRATIME, true},
	"relatime":    {unix.MS_RELATIME, false},
	"norelatime":  {unix.MS_RELATIME, true},
	"strictatime": {unix.MS_STRICTATIME, false},
	"lazytime":    {unix.MS_LAZYTIME, false},
	"nolazytime":  {unix.MS_LAZYTIME, true},
	"mand":        {unix.MS_MANDLOCK, false},
	"nomand":      {unix.MS_MANDLOCK, true},
	"silent":      {unix.MS_SILENT, false},
	"loud":        {unix.MS_SILENT, true},
	"bind":        {unix.MS_BIND, false},
	"rbind":       {unix.MS_BIND | unix.MS_REC, false},
}

// fstabOnly are options that mean something to fstab or mount(8) but not
// to the kernel; they are accepted and ignored.
var fstabOnly = map[string]bool{"defaults": true, "auto": true, "noauto": true, "nofail": true, "_netdev": true, "user": false, "users": false}

// parseOptions splits a mount(8) option string into mount(2) flags and the
// filesystem-specific data string.
func parseOptions(opts string) (flags uintptr, data string, err error) {
	var rest []string
	for _, o := range strings.Split(opts, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if f, ok := mountFlags[o]; ok {
			if f.clear {
				flags &^= f.flag
			} else {
				flags |= f.flag
			}
			continue
		}
		if fstabOnly[o] || strings.HasPrefix(o, "x-") || strings.HasPrefix(o, "comment=") {
			continue
		}
		switch {
		case o == "loop" || strings.HasPrefix(o, "loop="):
			return 0, "", fmt.Errorf("option %q: set the loop device up beforehand (losetup) and give it as device", o)
		case o == "user" || o == "users" || o == "owner" || o == "group":
			return 0, "", fmt.Errorf("option %q: user mounts are mount(8)'s business, not the daemon's", o)
		case o == "remount":
			return 0, "", fmt.Errorf("option %q: not allowed for the shared storage", o)
		}
		rest = append(rest, o)
	}
	return flags, strings.Join(rest, ","), nil
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	mountpoint string
	fstype     string
	source     string
}

// readMountinfo parses a mountinfo file (proc(5)).
func readMountinfo(path string) ([]mountEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMountinfo(b, path)
}

// parseMountinfo parses mountinfo content; name is used in errors.
func parseMountinfo(b []byte, path string) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(line, " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 2 {
			return nil, fmt.Errorf("%s line %d: malformed", path, n)
		}
		out = append(out, mountEntry{mountpoint: unescape(fields[4]), fstype: tail[0], source: unescape(tail[1])})
	}
	return out, sc.Err()
}

// unescape decodes mountinfo's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// canonical resolves symlinks in p when it exists, so /dev/disk/by-id/...
// and /dev/sdb compare equal, as do a mountpoint and its resolved path.
func canonical(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// topMount returns the mount visible at mountpoint (the last one mounted
// there), if any.
func topMount(entries []mountEntry, mountpoint string) (mountEntry, bool) {
	var found mountEntry
	ok := false
	for _, e := range entries {
		if e.mountpoint == mountpoint {
			found, ok = e, true
		}
	}
	return found, ok
}
