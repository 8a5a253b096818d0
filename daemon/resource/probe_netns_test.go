package resource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
)

// TestMain runs the probe helper when asked (inside a network namespace,
// see TestProbeNetns), else the tests.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FENCED_TEST_PROBE"); spec != "" {
		os.Exit(probeHelper(spec))
	}
	os.Exit(m.Run())
}

type probeSpec struct {
	VIP, Loop, Dir string
}

type probeResult struct {
	Err        string
	Ineligible bool
	States     []string
}

// probeHelper plays a node that restarted while it held the group: in
// its own network and mount namespaces, the floating IP is still
// configured, Dummy's state is left, and the filesystem is mounted and
// kept busy by a process. It probes with Filesystem → IPaddr2 → Dummy and
// prints the result as JSON.
func probeHelper(spec string) int {
	var s probeSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Println(err)
		return 2
	}
	mnt := filepath.Join(s.Dir, "mnt")
	os.MkdirAll(mnt, 0o755)
	if out, err := exec.Command("mount", s.Loop, mnt).CombinedOutput(); err != nil {
		fmt.Printf("mount: %v %s\n", err, out)
		return 2
	}
	busy := exec.Command("sleep", "60")
	busy.Dir = mnt
	if err := busy.Start(); err != nil {
		fmt.Println(err)
		return 2
	}
	defer func() {
		busy.Process.Kill()
		busy.Wait()
		exec.Command("umount", mnt).Run()
	}()
	cfg := config.Default()
	cfg.Resources = []config.Resource{
		{Name: "data", OCF: "heartbeat:Filesystem", Params: map[string]string{"device": s.Loop, "directory": mnt, "fstype": "ext4", "force_unmount": "false"},
			Timeouts: config.ResourceTimeouts{Stop: config.Duration(3 * time.Second)}},
		{Name: "vip", OCF: "heartbeat:IPaddr2", Params: map[string]string{"ip": s.VIP, "cidr_netmask": "24", "nic": "eth0"}},
		{Name: "app", OCF: "heartbeat:Dummy", Params: map[string]string{"state": filepath.Join(s.Dir, "app.state")}},
	}
	g, err := New(context.Background(), cfg, "node1", slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	var res probeResult
	if err := g.Probe(context.Background()); err != nil {
		res.Err, res.Ineligible = err.Error(), errors.Is(err, ErrIneligible)
	}
	for _, st := range g.Status() {
		res.States = append(res.States, st.Name+"="+st.State)
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// TestProbeNetns: a node restarts with the floating IP still on its
// interface, Dummy's state left and the shared filesystem mounted and
// busy. The probe (real IPaddr2, Dummy, Filesystem) removes the address
// and stops Dummy, cannot unmount the busy filesystem (force_unmount
// false), and so reports the node ineligible. Needs root.
func TestProbeNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root")
		}
		t.Fatal("needs root for a network namespace and a loop device (run as root, or -short)")
	}
	for _, a := range []string{dummy, "heartbeat:IPaddr2", "heartbeat:Filesystem"} {
		needAgent(t, a)
	}
	dir := t.TempDir()
	ns := fmt.Sprintf("frp%d", os.Getpid()%10000)
	subnet := 1 + os.Getpid()%200
	vip := fmt.Sprintf("10.214.%d.100", subnet)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", ns).Run()
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	run("ip", "-n", ns, "link", "set", "eth0", "up")
	run("ip", "-n", ns, "link", "set", "eth1", "up")
	run("ip", "-n", ns, "addr", "add", fmt.Sprintf("10.214.%d.1/24", subnet), "dev", "eth0")
	run("ip", "-n", ns, "addr", "add", vip+"/24", "dev", "eth0") // left from before the restart
	os.WriteFile(filepath.Join(dir, "app.state"), nil, 0o644)    // so is Dummy's state
	img := filepath.Join(dir, "disk.img")
	os.WriteFile(img, nil, 0o600)
	os.Truncate(img, 32<<20)
	run("mkfs.ext4", "-q", "-F", img)
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })

	spec, _ := json.Marshal(probeSpec{VIP: vip, Loop: loop, Dir: dir})
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FENCED_TEST_PROBE="+string(spec))
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe helper: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res probeResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("probe helper output: %v\n%s", err, out)
	}
	t.Logf("probe: %+v", res)
	// Filesystem spends its timeout retrying the unmount: it gives up
	// itself (exit 1) or, on a loaded machine, is killed at the timeout;
	// either is a failed stop.
	failed := strings.Contains(res.Err, "heartbeat:Filesystem stop: exit 1") || strings.Contains(res.Err, "heartbeat:Filesystem stop: timed out")
	if !res.Ineligible || !strings.Contains(res.Err, "resource data runs here and could not be stopped") || !failed {
		t.Errorf("probe error %q (ineligible %v), want data's failed stop", res.Err, res.Ineligible)
	}
	if want := "data=failed vip=stopped app=stopped"; strings.Join(res.States, " ") != want {
		t.Errorf("states %v, want %s", res.States, want)
	}
	addrs, _ := exec.Command("ip", "-n", ns, "-o", "addr", "show", "dev", "eth0").Output()
	if strings.Contains(string(addrs), vip+"/") {
		t.Errorf("the probe left the floating IP configured:\n%s", addrs)
	}
	if exists(filepath.Join(dir, "app.state")) {
		t.Error("the probe left Dummy running")
	}
}
