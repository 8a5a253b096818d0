package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenced/fenced/daemon/config"
)

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newManager(t *testing.T, cfg config.Storage) *Manager {
	t.Helper()
	m, err := New(cfg, "node2", nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHookEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FENCED_TEST_PARENT", "inherited")
	t.Setenv("FENCED_EPOCH", "999") // a stale value in the daemon's own environment is overridden
	dump := `echo "$FENCED_ACTION epoch=$FENCED_EPOCH node=$FENCED_NODE prev=$FENCED_PREVIOUS_HOLDER parent=$FENCED_TEST_PARENT" >> ` + dir + "/env\n"
	m := newManager(t, config.Storage{Hooks: config.Hooks{
		Start: script(t, dir, "start", dump), Stop: script(t, dir, "stop", dump), Monitor: script(t, dir, "monitor", dump),
	}})
	ctx := ctxFor(t, 10*time.Second)
	if err := m.Start(ctx, 7, "node1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Monitor(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	want := "start epoch=7 node=node2 prev=node1 parent=inherited\n" +
		"monitor epoch=7 node=node2 prev=node1 parent=inherited\n" +
		"stop epoch=7 node=node2 prev=node1 parent=inherited\n"
	if string(b) != want {
		t.Fatalf("hooks saw:\n%s\nwant:\n%s", b, want)
	}
}

func TestHookFailure(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, config.Storage{Hooks: config.Hooks{
		Start: script(t, dir, "start", "echo 'cannot open the database' >&2\nexit 3\n"),
		Stop:  script(t, dir, "stop", "echo stopping; exit 1\n"),
	}})
	err := m.Start(ctxFor(t, 10*time.Second), 4, "")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "cannot open the database") || !strings.Contains(err.Error(), "storage start hook") {
		t.Fatalf("start error %v", err)
	}
	if err := m.Stop(ctxFor(t, 10*time.Second)); err == nil || !strings.Contains(err.Error(), "storage stop hook") || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("stop error %v", err)
	}
}

func TestHookOutputBounded(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, config.Storage{Hooks: config.Hooks{
		Start: script(t, dir, "start", "i=0; while [ $i -lt 3000 ]; do echo \"line $i of noise\"; i=$((i+1)); done; echo LAST; exit 1\n"),
	}})
	m.OutputLimit = 512
	err := m.Start(ctxFor(t, 10*time.Second), 1, "")
	if err == nil || !strings.Contains(err.Error(), "LAST") || strings.Contains(err.Error(), "line 0 of noise") || len(err.Error()) > 1024 {
		t.Fatalf("error (%d bytes): %.300s", len(err.Error()), err)
	}
}

// processGone reports whether pid has exited (gone or a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestHookTimeoutKillsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	m := newManager(t, config.Storage{Hooks: config.Hooks{
		Start: script(t, dir, "start", "sleep 60 &\necho $! > "+pidFile+"\necho started child\nsleep 60\n"),
	}})
	start := time.Now()
	err := m.Start(ctxFor(t, 300*time.Millisecond), 1, "")
	if err == nil || !strings.Contains(err.Error(), "killed with its process group") || !strings.Contains(err.Error(), "started child") {
		t.Fatalf("error %v", err)
	}
	t.Logf("hook killed after %v", time.Since(start))
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			unix.Kill(pid, unix.SIGKILL)
			t.Fatalf("the hook's background child %d survived the timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A start hook that leaves a service running returns at once: its output
// is not a pipe the service holds open.
func TestHookBackgroundServiceDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "svc.pid")
	m := newManager(t, config.Storage{Hooks: config.Hooks{
		Start: script(t, dir, "start", "sleep 30 &\necho $! > "+pidFile+"\n"),
		Stop:  script(t, dir, "stop", "kill $(cat "+pidFile+")\n"),
	}})
	if err := m.Start(ctxFor(t, 5*time.Second), 1, ""); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("mounting needs root")
		}
		t.Fatal("mount tests need root (CI runs them as root)")
	}
}

// countMounts counts the mounts at mountpoint.
func countMounts(t *testing.T, mountpoint string) (n int, last mountEntry) {
	t.Helper()
	entries, err := readMountinfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.mountpoint == mountpoint {
			n, last = n+1, e
		}
	}
	return n, last
}

// tmpfsDir returns a directory whose mounts are detached at cleanup.
func tmpfsDir(t *testing.T) (dir, mp string) {
	dir = t.TempDir()
	mp = filepath.Join(canonical(dir), "shared")
	t.Cleanup(func() {
		for range 5 {
			if unix.Unmount(mp, unix.MNT_DETACH) != nil {
				break
			}
		}
	})
	return dir, mp
}

// The real thing: tmpfs mounted and unmounted through mount(2), in order
// with the hooks, idempotent, watched by Monitor.
func TestMountTmpfs(t *testing.T) {
	requireRoot(t)
	dir, mp := tmpfsDir(t)
	order := filepath.Join(dir, "order")
	check := `if grep -q " ` + mp + ` " /proc/self/mountinfo; then echo "$FENCED_ACTION mounted" >> ` + order + `; else echo "$FENCED_ACTION unmounted" >> ` + order + "; fi\n"
	m := newManager(t, config.Storage{
		Mount: &config.Mount{Device: "fenced-test", Mountpoint: mp, FSType: "tmpfs", Options: "size=1m,mode=0750,nosuid,nodev,noexec,defaults,x-fenced"},
		Hooks: config.Hooks{Start: script(t, dir, "start", check), Stop: script(t, dir, "stop", check)},
	})
	ctx := ctxFor(t, 20*time.Second)
	if err := m.Start(ctx, 3, "node1"); err != nil {
		t.Fatal(err)
	}
	n, e := countMounts(t, mp)
	if n != 1 || e.fstype != "tmpfs" || e.source != "fenced-test" {
		t.Fatalf("after start: %d mounts, %+v", n, e)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mp, &st); err != nil || st.Flags&unix.ST_NOEXEC == 0 || st.Flags&unix.ST_NOSUID == 0 {
		t.Fatalf("flags not applied: %x %v", st.Flags, err)
	}
	if fi, err := os.Stat(mp); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("data option mode=0750 not applied: %v %v", fi.Mode(), err)
	}
	if err := m.Monitor(ctx); err != nil {
		t.Fatal(err)
	}
	// Start again: already mounted by us, not mounted twice.
	if err := m.Start(ctx, 3, "node1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := countMounts(t, mp); n != 1 {
		t.Fatalf("second start: %d mounts", n)
	}
	// Someone unmounts it behind our back: Monitor notices.
	if err := unix.Unmount(mp, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Monitor(ctx); err == nil || !strings.Contains(err.Error(), "no longer mounted") {
		t.Fatalf("monitor after external unmount: %v", err)
	}
	if err := m.Start(ctx, 4, "node1"); err != nil {
		t.Fatal(err)
	}
	// Busy: an open file keeps the unmount from finishing; that is an
	// error (the daemon self-fences), never a lazy detach.
	f, err := os.Create(filepath.Join(mp, "open"))
	if err != nil {
		t.Fatal(err)
	}
	m.BusyRetry = 20 * time.Millisecond
	err = m.Stop(ctxFor(t, 200*time.Millisecond))
	if err == nil || !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), "still busy") {
		t.Fatalf("stop while busy: %v", err)
	}
	if n, _ := countMounts(t, mp); n != 1 {
		t.Fatalf("busy stop detached the mount: %d mounts", n)
	}
	f.Close()
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := countMounts(t, mp); n != 0 {
		t.Fatalf("after stop: %d mounts", n)
	}
	// Stop again: nothing mounted is success.
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	want := "start mounted\nstart mounted\nstart mounted\nstop mounted\nstop mounted\nstop unmounted\n"
	if string(b) != want {
		t.Fatalf("hook order:\n%s\nwant:\n%s", b, want)
	}
}

// Our filesystem with another mounted over it is not stopped: Stop fails
// (the daemon self-fences) rather than report success with the device
// still mounted beneath, and the probe says it runs here. Once the other
// is gone, Stop unmounts ours.
func TestStopFailsWhenOursIsBeneath(t *testing.T) {
	requireRoot(t)
	_, mp := tmpfsDir(t)
	m := newManager(t, config.Storage{Mount: &config.Mount{Device: "fenced-test", Mountpoint: mp, FSType: "tmpfs"}})
	ctx := ctxFor(t, 10*time.Second)
	if err := m.Start(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("someone-else", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	err := m.Stop(ctx)
	if err == nil || !strings.Contains(err.Error(), "fenced-test is still mounted at "+mp+" beneath someone-else (tmpfs)") {
		t.Fatalf("stop with ours beneath another: %v", err)
	}
	if running, err := m.Running(ctx); err != nil || !running {
		t.Fatalf("probe with ours beneath another: running %v, %v", running, err)
	}
	if n, _ := countMounts(t, mp); n != 2 {
		t.Fatalf("%d mounts, want both left as they were", n)
	}
	if err := unix.Unmount(mp, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := countMounts(t, mp); n != 0 {
		t.Fatalf("after stop: %d mounts", n)
	}
	if running, err := m.Running(ctx); err != nil || running {
		t.Fatalf("probe after stop: running %v, %v", running, err)
	}
}

// A foreign filesystem on the mountpoint is never mounted over, nor
// unmounted by Stop.
func TestMountRefusesForeignMount(t *testing.T) {
	requireRoot(t)
	_, mp := tmpfsDir(t)
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("someone-else", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, config.Storage{Mount: &config.Mount{Device: "fenced-test", Mountpoint: mp, FSType: "tmpfs"}})
	ctx := ctxFor(t, 10*time.Second)
	if err := m.Start(ctx, 1, ""); err == nil || !strings.Contains(err.Error(), "someone-else (tmpfs) is already mounted there") {
		t.Fatalf("start over a foreign mount: %v", err)
	}
	if err := m.Monitor(ctx); err == nil || !strings.Contains(err.Error(), "instead of fenced-test") {
		t.Fatalf("monitor: %v", err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := countMounts(t, mp); n != 1 {
		t.Fatalf("stop touched the foreign mount: %d mounts", n)
	}
}

func TestNewValidation(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plain")
	os.WriteFile(notExec, []byte("x"), 0o644)
	_, err := New(config.Storage{
		Mount: &config.Mount{Device: "", Mountpoint: "relative", Options: "loop"},
		Hooks: config.Hooks{Start: "start.sh", Stop: notExec, Monitor: filepath.Join(dir, "missing")},
	}, "", nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"node name empty", "storage.mount.device: required", `storage.mount.mountpoint: "relative"`,
		"storage.mount.fstype: required", "storage.mount.options: option \"loop\"",
		`storage.hooks.start: "start.sh" is not an absolute path`, "storage.hooks.stop: " + notExec + " is not an executable file",
		"storage.hooks.monitor: stat",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		in    string
		flags uintptr
		data  string
		err   string
	}{
		{"", 0, "", ""},
		{"defaults", 0, "", ""},
		{"ro,noatime,size=1m", unix.MS_RDONLY | unix.MS_NOATIME, "size=1m", ""},
		{"ro,rw", 0, "", ""},
		{"nosuid, nodev ,errors=remount-ro,_netdev,x-systemd.automount", unix.MS_NOSUID | unix.MS_NODEV, "errors=remount-ro", ""},
		{"rbind", unix.MS_BIND | unix.MS_REC, "", ""},
		{"loop=/dev/loop0", 0, "", "losetup"},
		{"remount", 0, "", "not allowed"},
		{"users", 0, "", "user mounts"},
	} {
		flags, data, err := parseOptions(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || flags != c.flags || data != c.data {
			t.Errorf("%q: %x %q %v; want %x %q", c.in, flags, data, err, c.flags, c.data)
		}
	}
}

func TestReadMountinfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mountinfo")
	os.WriteFile(p, []byte(
		"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"+
			"90 22 0:50 / /srv/my\\040data rw,nosuid master:3 shared:7 - tmpfs my\\134dev rw,size=1024k\n"), 0o644)
	entries, err := readMountinfo(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[1].mountpoint != "/srv/my data" || entries[1].fstype != "tmpfs" || entries[1].source != `my\dev` {
		t.Fatalf("%+v", entries)
	}
	os.WriteFile(p, []byte("22 1 8:1 / / rw\n"), 0o644)
	if _, err := readMountinfo(p); err == nil || !strings.Contains(err.Error(), "line 1: malformed") {
		t.Fatalf("malformed accepted: %v", err)
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"))
	f.Add([]byte("90 22 0:50 / /srv/my\\040data rw - tmpfs my\\13 rw\n"))
	f.Add([]byte(" - \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseMountinfo(b, "fuzz")
	})
}

func FuzzParseOptions(f *testing.F) {
	f.Add("ro,noatime,size=1m,x-a,loop")
	f.Fuzz(func(t *testing.T, s string) {
		parseOptions(s)
	})
}
