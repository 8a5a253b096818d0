package nemesis

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on an OS thread that has entered the named network
// namespace (/run/netns/NAME); sockets fn opens stay in that namespace for
// their whole life. The thread goes back to its own namespace afterwards
// (it may be the main thread, which /proc/self describes); if that fails it
// stays locked, and ends with the goroutine.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("netns: own namespace: %w", err)
			return
		}
		defer own.Close()
		f, err := os.Open("/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: %w", name, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// run runs a command and returns its error with its output.
func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netRules is the nftables state of one node's namespace: the peers it
// cannot reach (both directions) and a random loss towards the others.
type netRules struct {
	blocked []string // peer addresses
	lossPct int      // 0..100, applied to every peer address
	peers   []string
}

// nft renders the rules as one table, replacing the previous one.
func (r netRules) nft() string {
	var in, out []string
	if len(r.blocked) > 0 {
		set := strings.Join(r.blocked, ", ")
		in = append(in, fmt.Sprintf("ip saddr { %s } drop", set))
		out = append(out, fmt.Sprintf("ip daddr { %s } drop", set))
	}
	if r.lossPct > 0 && len(r.peers) > 0 {
		set := strings.Join(r.peers, ", ")
		in = append(in, fmt.Sprintf("ip saddr { %s } numgen random mod 100 < %d drop", set, r.lossPct))
		out = append(out, fmt.Sprintf("ip daddr { %s } numgen random mod 100 < %d drop", set, r.lossPct))
	}
	var b strings.Builder
	// Create-then-delete makes the load idempotent whether or not the
	// table existed.
	b.WriteString("table inet nemesis {}\ndelete table inet nemesis\n")
	b.WriteString("table inet nemesis {\n  chain in {\n    type filter hook input priority 0; policy accept;\n")
	for _, r := range in {
		b.WriteString("    " + r + "\n")
	}
	b.WriteString("  }\n  chain out {\n    type filter hook output priority 0; policy accept;\n")
	for _, r := range out {
		b.WriteString("    " + r + "\n")
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// applyRules loads rules into namespace ns.
func applyRules(ns string, r netRules) error {
	sort.Strings(r.blocked)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(r.nft())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}
