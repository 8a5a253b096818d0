package devcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Machines makes each node of a Netns a machine of its own for resource
// agents: a mount namespace that outlives the node's processes (as a
// machine's mounts and addresses outlive a crashed daemon), with a private
// /run/resource-agents (agents keep their state there; a reboot empties
// it). PowerOff is what a BMC's power-off does to the machine: its mounts
// and its network configuration go, its link goes down. Boot starts a
// fresh one. Needs root, util-linux (unshare, nsenter) and iproute2.
type Machines struct {
	ns  *Netns
	dir string // private mount holding one mount-namespace file per node

	mu     sync.Mutex
	booted map[int]bool
	// init[i] is a process living in machine i (both namespaces) as
	// long as it is powered: its /proc entries show the machine's mounts
	// and addresses without starting a process per look.
	init map[int]*exec.Cmd
}

// NewMachines prepares machines for ns's nodes under dir and boots them.
func NewMachines(ns *Netns, dir string) (*Machines, error) {
	m := &Machines{ns: ns, dir: filepath.Join(dir, "machines"), booted: map[int]bool{}, init: map[int]*exec.Cmd{}}
	for _, d := range []string{m.dir, "/run/resource-agents"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// A mount-namespace file can only be bound on a private mount (a shared
	// one would propagate it into the namespace itself).
	if err := run("mount", "--bind", m.dir, m.dir); err != nil {
		return nil, err
	}
	if err := run("mount", "--make-private", m.dir); err != nil {
		m.Close()
		return nil, err
	}
	for i := range ns.Hosts {
		if err := m.Boot(i); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

func (m *Machines) mntFile(i int) string { return filepath.Join(m.dir, fmt.Sprintf("mnt%d", i)) }

// Boot gives node i a fresh mount namespace (a copy of the host's, host
// mounts propagating in, its own not out) with an empty tmpfs on
// /run/resource-agents, and brings its network up with only its own
// address: a machine just powered on.
func (m *Machines) Boot(i int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.booted[i] {
		return nil
	}
	f := m.mntFile(i)
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		return err
	}
	if err := run("unshare", "--mount="+f, "--propagation", "slave", "true"); err != nil {
		return err
	}
	if err := run("nsenter", "--mount="+f, "--", "mount", "-t", "tmpfs", "-o", "mode=1755", "tmpfs", "/run/resource-agents"); err != nil {
		return err
	}
	name, host := m.ns.Name(i), m.ns.Hosts[i]
	_ = run("ip", "-n", name, "addr", "flush", "dev", "eth0")
	if err := run("ip", "-n", name, "addr", "add", host+"/24", "dev", "eth0"); err != nil {
		return err
	}
	if err := run("ip", "-n", name, "link", "set", "eth0", "up"); err != nil {
		return err
	}
	w := m.Wrap(i, []string{"sleep", "infinity"})
	init := exec.Command(w[0], w[1:]...)
	if err := init.Start(); err != nil {
		return err
	}
	m.init[i] = init
	m.booted[i] = true
	return nil
}

// PowerOff takes node i's machine down after its processes were killed:
// the link goes down, its addresses (a floating IP among them) and its
// mount namespace (a mounted filesystem among them) go away.
func (m *Machines) PowerOff(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := m.ns.Name(i)
	if init := m.init[i]; init != nil {
		_ = init.Process.Kill()
		_ = init.Wait()
		delete(m.init, i)
	}
	_ = run("ip", "-n", name, "link", "set", "eth0", "down")
	_ = run("ip", "-n", name, "addr", "flush", "dev", "eth0")
	// Dropping the last reference ends the namespace and its mounts.
	_ = run("umount", m.mntFile(i))
	m.booted[i] = false
}

// Wrap runs argv inside node i's machine: its mount and network namespaces.
func (m *Machines) Wrap(i int, argv []string) []string {
	return append([]string{"nsenter", "--mount=" + m.mntFile(i), "--net=/run/netns/" + m.ns.Name(i), "--"}, argv...)
}

// Exec runs argv inside node i's machine and returns its output.
func (m *Machines) Exec(i int, argv ...string) ([]byte, error) {
	w := m.Wrap(i, argv)
	out, err := exec.Command(w[0], w[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Mounted reports whether node i's machine has something mounted at dir
// (false while it is powered off).
func (m *Machines) Mounted(i int, dir string) (bool, error) {
	b, err := m.procFile(i, "mountinfo")
	if err != nil || b == nil {
		return false, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			return false, errors.New("malformed mountinfo line: " + line)
		}
		if strings.ReplaceAll(f[4], `\040`, " ") == dir {
			return true, nil
		}
	}
	return false, nil
}

// HasAddr reports whether node i's machine has the local IPv4 address ip
// configured (false while it is powered off), from its routing trie.
func (m *Machines) HasAddr(i int, ip string) (bool, error) {
	b, err := m.procFile(i, "net/fib_trie")
	if err != nil || b == nil {
		return false, err
	}
	last := ""
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if a, ok := strings.CutPrefix(t, "|-- "); ok {
			last = a
		} else if strings.HasPrefix(t, "/32 host LOCAL") && last == ip {
			return true, nil
		}
	}
	return false, nil
}

// procFile reads /proc/PID/name of machine i's init; nil when powered off.
func (m *Machines) procFile(i int, name string) ([]byte, error) {
	m.mu.Lock()
	init := m.init[i]
	m.mu.Unlock()
	if init == nil {
		return nil, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", init.Process.Pid, name))
	if err != nil {
		return nil, fmt.Errorf("machine %d: %w", i, err)
	}
	return b, nil
}

// Close powers every machine off and removes the private mount.
func (m *Machines) Close() {
	for i := range m.ns.Hosts {
		m.PowerOff(i)
	}
	_ = run("umount", m.dir)
}

func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
