package nemesis

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A machine is what a BMC powers: a network namespace of the node's (made
// by the harness), and inside it, made at every power-on, a mount
// namespace, a PID namespace whose init is `nemesis init`, and optionally a
// time namespace with the clock offsets of this boot. The init starts
// fenced and reaps orphans; every process the node starts (storage hooks,
// the writers they leave running) lives in that PID namespace, so killing
// the init kills all of them, and the kernel reports the init dead only
// after all of them are gone.
//
// The process the BMC owns is `nemesis machine`, in the host's PID
// namespace: on SIGTERM (power-off) it kills the init and waits, so when it
// exits, nothing of the node runs any more.

// MachineSpec is what `nemesis machine` reads at every power-on.
type MachineSpec struct {
	Node  string   `json:"node"`
	Netns string   `json:"netns"`
	Argv  []string `json:"argv"` // fenced and its arguments
	Log   string   `json:"log"`
	// RunDir gets a tmpfs of the machine's own at boot: its /run.
	RunDir string `json:"runDir"`
	// Self is the nemesis binary.
	Self string `json:"self"`
	// Clock offsets of this boot, in seconds (time namespace); both zero
	// means the host's clocks.
	MonotonicOffset int64 `json:"monotonicOffsetSec"`
	BoottimeOffset  int64 `json:"boottimeOffsetSec"`
}

func readSpec(path string) (*MachineSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s MachineSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Netns == "" || len(s.Argv) == 0 || s.Log == "" || s.RunDir == "" || s.Self == "" {
		return nil, fmt.Errorf("%s: netns, argv, log, runDir and self are required", path)
	}
	return &s, nil
}

func writeSpec(path string, s *MachineSpec) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func logTo(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// RunMachine is `nemesis machine --spec FILE`: one power-on of a node.
func RunMachine(specPath string) error {
	// The child gets SIGKILL if this thread dies (Pdeathsig is per
	// thread): keep the main goroutine on the main thread.
	runtime.LockOSThread()
	spec, err := readSpec(specPath)
	if err != nil {
		return err
	}
	logf, err := logTo(spec.Log)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"netns", "exec", spec.Netns, "unshare", "--fork", "--pid", "--mount-proc",
		"--mount", "--propagation", "private", "--kill-child=SIGKILL"}
	if spec.MonotonicOffset != 0 || spec.BoottimeOffset != 0 {
		args = append(args, "--time", "--monotonic="+strconv.FormatInt(spec.MonotonicOffset, 10),
			"--boottime="+strconv.FormatInt(spec.BoottimeOffset, 10))
	}
	args = append(args, "--", spec.Self, "init", "--spec", specPath)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	fmt.Fprintf(logf, "%s nemesis machine %s: power on (clock offsets: monotonic %+ds, boottime %+ds)\n",
		stamp(), spec.Node, spec.MonotonicOffset, spec.BoottimeOffset)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("machine %s: %w", spec.Node, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		fmt.Fprintf(logf, "%s nemesis machine %s: down (%v)\n", stamp(), spec.Node, err)
		return nil
	case <-sigs:
	}
	// Power-off: the init and with it every process of the node.
	for range 100 {
		if init := initOf(cmd.Process.Pid); init > 0 {
			syscall.Kill(init, syscall.SIGKILL)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	fmt.Fprintf(logf, "%s nemesis machine %s: powered off\n", stamp(), spec.Node)
	return nil
}

func stamp() string { return time.Now().Format("2006-01-02T15:04:05.000Z07:00") }

// initOf returns the PID (host numbering) of the init under a `nemesis
// machine` or `unshare` process: the first descendant in another PID
// namespace, or 0.
func initOf(pid int) int {
	own := pidNS(pid)
	for _, c := range childrenOf(pid) {
		if ns := pidNS(c); ns != "" && ns != own {
			return c
		}
		if g := initOf(c); g > 0 {
			return g
		}
	}
	return 0
}

func pidNS(pid int) string {
	s, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return s
}

// procStat returns the fields of /proc/PID/stat after the command name:
// state, ppid, pgrp, session, ...
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// childrenOf lists pid's children, from every thread's children list (a
// Go program forks from any of its threads).
func childrenOf(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// nsPids lists the processes in the PID namespace whose init is init.
func nsPids(init int) []int {
	ns := pidNS(init)
	if ns == "" {
		return nil
	}
	var out []int
	for _, p := range allPids() {
		if pidNS(p) == ns {
			out = append(out, p)
		}
	}
	return out
}

// RunInit is `nemesis init --spec FILE`, PID 1 of a machine: it gives the
// machine its own /run, starts fenced, reaps every orphan, starts fenced
// again on SIGHUP if it is not running, and passes SIGTERM on to it. It
// never exits on its own: the machine stays up without its daemon until it
// is powered off, as a real one would.
func RunInit(specPath string) error {
	spec, err := readSpec(specPath)
	if err != nil {
		return err
	}
	logf, err := logTo(spec.Log)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(spec.RunDir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", spec.RunDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16m,mode=755"); err != nil {
		return fmt.Errorf("init: tmpfs on %s: %w", spec.RunDir, err)
	}
	reset, err := standInSysrq(spec.RunDir)
	if err != nil {
		return err
	}
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	ctl := make(chan os.Signal, 4)
	signal.Notify(ctl, syscall.SIGHUP, syscall.SIGTERM)
	devnull, _ := os.Open(os.DevNull)
	start := func() int {
		p, err := os.StartProcess(spec.Argv[0], spec.Argv, &os.ProcAttr{Dir: "/", Files: []*os.File{devnull, logf, logf}})
		if err != nil {
			fmt.Fprintf(logf, "%s nemesis init: start fenced: %v\n", stamp(), err)
			return 0
		}
		return p.Pid
	}
	daemon := start()
	for {
		select {
		case <-chld:
			for {
				var ws unix.WaitStatus
				pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
				if pid == daemon {
					fmt.Fprintf(logf, "%s nemesis init: fenced exited: %s\n", stamp(), describeWait(ws))
					daemon = 0
				}
			}
		case s := <-ctl:
			switch {
			case s == syscall.SIGHUP && daemon == 0:
				daemon = start()
			case s == syscall.SIGTERM && daemon != 0:
				syscall.Kill(daemon, syscall.SIGTERM)
			}
		case <-reset:
			// The init's end is the PID namespace's: every process of
			// the machine goes, as in a reset (the machine stays off).
			fmt.Fprintf(logf, "%s nemesis init: sysrq reboot requested: the machine resets\n", stamp())
			return nil
		}
	}
}

// standInSysrq puts a file of the machine's own over /proc/sysrq-trigger
// (in its mount namespace), so that a self-fence resets this machine and
// never the host, and returns a channel closed when something writes to
// it. Where the kernel has no sysrq there is nothing to cover: the daemon
// finds it refused, as on such a machine.
func standInSysrq(dir string) (<-chan struct{}, error) {
	const trigger = "/proc/sysrq-trigger"
	if _, err := os.Stat(trigger); err != nil {
		return nil, nil
	}
	stand := filepath.Join(dir, "sysrq-trigger")
	if err := os.WriteFile(stand, nil, 0o200); err != nil {
		return nil, fmt.Errorf("init: sysrq stand-in: %w", err)
	}
	if err := unix.Mount(stand, trigger, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("init: sysrq stand-in over %s (a self-fence would reboot the host): %w", trigger, err)
	}
	reset := make(chan struct{})
	go func() {
		for {
			time.Sleep(50 * time.Millisecond)
			if st, err := os.Stat(stand); err == nil && st.Size() > 0 {
				close(reset)
				return
			}
		}
	}()
	return reset, nil
}

func describeWait(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("status %#x", uint32(ws))
}

// machineProcs finds the processes of a running machine from its `nemesis
// machine` process: the init and everything in its PID namespace.
type machineProcs struct {
	helper, init int
}

func (m machineProcs) pids() []int {
	if m.init == 0 {
		return nil
	}
	return nsPids(m.init)
}

// daemonPid is fenced's PID (host numbering), or 0.
func (m machineProcs) daemonPid(fenced string) int {
	for _, p := range childrenOf(m.init) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == filepath.Base(fenced) && args[1] == "run" {
			return p
		}
	}
	return 0
}

// signalAll sends sig to every process of the machine, repeating until a
// pass finds none it has not signalled (processes forked meanwhile).
func (m machineProcs) signalAll(sig syscall.Signal) error {
	seen := map[int]bool{}
	for range 20 {
		fresh := 0
		for _, p := range m.pids() {
			if seen[p] {
				continue
			}
			seen[p] = true
			fresh++
			syscall.Kill(p, sig)
		}
		if fresh == 0 {
			if len(seen) == 0 {
				return errors.New("machine has no processes")
			}
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// stopped reports whether every process of the machine is stopped (or a
// zombie).
func (m machineProcs) stopped() bool {
	for _, p := range m.pids() {
		if f := procStat(p); len(f) > 0 && f[0] != "T" && f[0] != "t" && f[0] != "Z" {
			return false
		}
	}
	return true
}
