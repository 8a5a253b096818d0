package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/harness/devcluster"
)

// A quick-start block: where its commands run, and what it holds.
type qsBlock struct {
	lang  string // "sh" or "yaml"
	on    string // "every node", "node1", "the primary", ...
	lines []string
}

// quickStart reads the README's quick start: its code blocks between the
// markers, in order.
func quickStart(t *testing.T) []qsBlock {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- quickstart: begin -->")
	section, _, ok2 := strings.Cut(rest, "<!-- quickstart: end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no quick start between its markers")
	}
	var blocks []qsBlock
	var cur *qsBlock
	for _, l := range strings.Split(section, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &qsBlock{lang: strings.TrimPrefix(l, "```")}
		case cur != nil && l == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil && cur.lang == "sh" && strings.HasPrefix(l, "# on "):
			cur.on = strings.TrimPrefix(l, "# on ")
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	return blocks
}

// qsNode is one node of the quick start: a directory standing for its
// machine's root, its BMC and its daemon.
type qsNode struct {
	name, root string
	gossip     int
	raft       int
	bmc        *ipmisim.BMC
	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
}

func (n *qsNode) path(p string) string { return filepath.Join(n.root, p) }
func (n *qsNode) socket() string       { return n.path("/run/fenced/fenced.sock") }

// TestQuickStart runs the README's quick start, command by command, on
// three nodes on this machine, as an admin would on three machines. What
// differs is said here and nowhere else: each node's root is a directory
// (its /etc/fenced, /var/lib/fenced and /run/fenced live under it; the
// package would have created them), its addresses are free loopback ports,
// its BMC is go-ipmi's simulator on loopback whose power-off kills the
// node and whose power-on starts it again (a machine whose unit is
// enabled), the node the hostname would select is given by node: in its
// file, and for running — not for
// validating — the shared disk and the floating address are Dummy OCF
// resources (nothing here may mount a disk or take an address).
func TestQuickStart(t *testing.T) {
	needOCFAgents(t, "Filesystem", "IPaddr2", "Dummy")
	blocks := quickStart(t)
	dir := t.TempDir()
	nodes := map[string]*qsNode{}
	var order []*qsNode
	for i := 1; i <= 3; i++ {
		n := &qsNode{name: fmt.Sprintf("node%d", i), root: filepath.Join(dir, fmt.Sprintf("node%d", i))}
		for _, d := range []string{"/etc/fenced", "/var/lib/fenced", "/run/fenced"} {
			if err := os.MkdirAll(n.path(d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if n.gossip, err = devcluster.FreePort("127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		if n.raft, err = devcluster.FreePort("127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		nodes[n.name] = n
		order = append(order, n)
	}
	// The unit's command line, as systemctl starts it.
	unit, err := os.ReadFile("../../packaging/fenced.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindSubmatch(unit)
	if m == nil || string(m[1]) != "/usr/sbin/fenced" {
		t.Fatalf("fenced.service: no ExecStart=/usr/sbin/fenced ...")
	}
	execStart := strings.Fields(string(m[2]))
	start := func(n *qsNode) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.cmd != nil {
			return nil
		}
		args := append([]string{}, execStart...)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "/etc/fenced", n.path("/etc/fenced"))
		}
		logf, err := os.OpenFile(n.path("/fenced.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		cmd := exec.Command(fencedBin, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return err
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); logf.Close(); close(done) }()
		n.cmd, n.done = cmd, done
		return nil
	}
	kill := func(n *qsNode) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.cmd == nil {
			return
		}
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.done
		n.cmd = nil
	}
	defer func() {
		for _, n := range order {
			kill(n)
			if n.bmc != nil {
				n.bmc.Close()
			}
			if t.Failed() {
				b, _ := os.ReadFile(n.path("/fenced.log"))
				t.Logf("---- %s ----\n%s", n.name, b[max(0, len(b)-4000):])
			}
		}
	}()

	// Each BMC takes the password the quick start writes into its file.
	var password string
	for _, b := range blocks {
		for _, l := range b.lines {
			if m := regexp.MustCompile(`printf '%s\\n' '([^']+)' > /etc/fenced/secrets/`).FindStringSubmatch(l); m != nil {
				password = m[1]
			}
		}
	}
	if password == "" {
		t.Fatal("the quick start writes no BMC password file")
	}
	for _, n := range order {
		n := n
		n.bmc, err = ipmisim.StartBMC(ipmisim.BMCConfig{Username: "fence", Password: password, PoweredOn: true,
			OnPowerOff: func() error { kill(n); return nil },
			OnPowerOn:  func() error { return start(n) }})
		if err != nil {
			t.Fatal(err)
		}
	}

	// The configuration, as each machine has it.
	var yamlBlock string
	for _, b := range blocks {
		if b.lang == "yaml" {
			yamlBlock = strings.Join(b.lines, "\n") + "\n"
		}
	}
	if yamlBlock == "" {
		t.Fatal("the quick start has no configuration")
	}
	local := func(n *qsNode, y string) string {
		for i, o := range order {
			y = strings.ReplaceAll(y, fmt.Sprintf("10.0.0.%d:7946", i+1), fmt.Sprintf("127.0.0.1:%d", o.gossip))
			y = strings.ReplaceAll(y, fmt.Sprintf("10.0.0.%d:7947", i+1), fmt.Sprintf("127.0.0.1:%d", o.raft))
			y = strings.ReplaceAll(y, fmt.Sprintf("ip: 10.0.1.%d,", i+1), fmt.Sprintf("ip: %s, ipport: %q,", o.bmc.Host(), strconv.Itoa(o.bmc.Port())))
		}
		y = strings.ReplaceAll(y, "/etc/fenced", n.path("/etc/fenced"))
		// The defaults of data_dir and api.socket, under this root; the
		// node the hostname would select.
		return y + fmt.Sprintf("data_dir: %s\napi: {socket: %s}\nnode: %s\n", n.path("/var/lib/fenced"), n.socket(), n.name)
	}
	running := func(n *qsNode, y string) string {
		i := strings.Index(y, "\nresources:")
		if i < 0 {
			t.Fatal("the quick start's configuration has no resources")
		}
		end := strings.Index(y[i+1:], "\ndata_dir:") // what local appended
		return y[:i+1] + fmt.Sprintf(`resources:
  - {name: data, ocf: "heartbeat:Dummy", node_params: {state: %s}}
  - {name: vip, ocf: "heartbeat:Dummy", node_params: {state: %s}}
`, n.path("/data.state"), n.path("/vip.state")) + y[i+1+end+1:]
	}

	// The commands, block by block.
	primary := func() *qsNode {
		for _, n := range order {
			if st, ok := qsStatus(n); ok && st.Primary.Node != "" {
				return nodes[st.Primary.Node]
			}
		}
		return nil
	}
	var fenced *qsNode // the node step 7 kills
	targets := func(on string) []*qsNode {
		switch {
		case on == "every node":
			return order
		case on == "the primary":
			p := primary()
			if p == nil {
				t.Fatal("no primary to run the commands on")
			}
			return []*qsNode{p}
		case strings.HasSuffix(on, " (or any node that is not the primary)"):
			n := nodes[strings.TrimSuffix(on, " (or any node that is not the primary)")]
			if p := primary(); p == n || fenced == n {
				for _, o := range order {
					if o != p && o != fenced {
						return []*qsNode{o}
					}
				}
			}
			return []*qsNode{n}
		case nodes[on] != nil:
			return []*qsNode{nodes[on]}
		}
		t.Fatalf("a quick-start block runs on %q: which node is that?", on)
		return nil
	}
	validated := map[string]string{} // node → fingerprint
	for _, b := range blocks {
		if b.lang == "yaml" {
			for _, n := range order {
				if err := os.WriteFile(n.path("/etc/fenced/fenced.yaml"), []byte(local(n, yamlBlock)), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		for _, n := range targets(b.on) {
			for _, line := range b.lines {
				line, _, _ = strings.Cut(line, " #") // a comment after the command
				line = strings.TrimSpace(line)
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				qsRun(t, line, n, nodes, qsActions{
					validated: validated, start: start, running: running, primary: primary, fenced: &fenced, kill: kill,
				})
			}
		}
	}
	if len(validated) != 3 || validated["node1"] != validated["node2"] || validated["node2"] != validated["node3"] {
		t.Errorf("fenced validate on every node: fingerprints %v, want one and the same", validated)
	}
	if fenced == nil {
		t.Fatal("the quick start never showed a failover")
	}
}

// qsActions are what the quick start's commands do to the test's nodes.
type qsActions struct {
	validated map[string]string
	start     func(*qsNode) error
	running   func(*qsNode, string) string
	primary   func() *qsNode
	fenced    **qsNode
	kill      func(*qsNode)
}

// qsRun runs one quick-start command on node n.
func qsRun(t *testing.T, line string, n *qsNode, nodes map[string]*qsNode, a qsActions) {
	t.Helper()
	t.Logf("on %s: %s", n.name, line)
	words := strings.Fields(line)
	sh := func(cmdline string) {
		t.Helper()
		if out, err := exec.Command("/bin/sh", "-c", cmdline).CombinedOutput(); err != nil {
			t.Fatalf("%s on %s (%s): %v\n%s", line, n.name, cmdline, err, out)
		}
	}
	sub := func(s string, on *qsNode) string { return strings.ReplaceAll(s, "/etc/fenced", on.path("/etc/fenced")) }
	switch {
	case words[0] == "apt" || words[0] == "dnf":
		// The package: packaging/package_test.go installs it. Here its
		// directories were made above.
	case line == "fenced keygen":
		sh(fencedBin + " keygen --out " + sub("/etc/fenced/gossip.key", n)) // its default --out
	case words[0] == "scp" && len(words) == 4 && words[1] == "-p":
		host, file, ok := strings.Cut(words[3], ":")
		to := nodes[host]
		if !ok || to == nil {
			t.Fatalf("%s: copies to %q", line, words[3])
		}
		sh("cp -p " + sub(words[2], n) + " " + sub(file, to))
	case words[0] == "install" || strings.HasPrefix(line, "(umask 077; printf "):
		sh(sub(line, n))
	case line == "fenced validate":
		out, err := exec.Command(fencedBin, "validate", "--config", sub("/etc/fenced/fenced.yaml", n)).CombinedOutput()
		m := regexp.MustCompile(`: ok \(3 nodes, majority 2; cluster configuration fingerprint ([0-9a-f]{16}), as node ` + n.name + `\)`).FindSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("fenced validate on %s: %v\n%s", n.name, err, out)
		}
		a.validated[n.name] = string(m[1])
	case line == "systemctl enable --now fenced":
		// Run with the resources this machine can run (see above).
		cfg := sub("/etc/fenced/fenced.yaml", n)
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, []byte(a.running(n, string(b))), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := a.start(n); err != nil {
			t.Fatal(err)
		}
	case line == "systemctl kill --signal=KILL fenced":
		if p := a.primary(); p != n {
			t.Fatalf("%q runs on %s, which is not the primary (%v)", line, n.name, p)
		}
		*a.fenced = n
		a.kill(n)
	case words[0] == "fencectl":
		args := words[1:]
		if len(args) == 2 && args[0] == "unfence" && args[1] == "NODE" {
			args[1] = (*a.fenced).name
		}
		qsFencectl(t, n, args, a)
	default:
		t.Fatalf("the quick start runs %q, which this test does not know: teach it", line)
	}
}

// qsFencectl runs fencectl on node n once what the quick start says it
// shows is there, and checks it.
func qsFencectl(t *testing.T, n *qsNode, args []string, a qsActions) {
	t.Helper()
	fenced := *a.fenced
	epoch := uint64(1)
	if fenced != nil {
		epoch = 2
	}
	ready := func() bool { return true }
	switch strings.Join(args, " ") {
	case "status":
		// One primary at the epoch, its resources running.
		ready = func() bool {
			st, ok := qsStatus(n)
			return ok && st.Primary.Node != "" && st.Primary.Epoch == epoch && (fenced == nil || st.Primary.Node != fenced.name) &&
				st.Primary.State == "mounted"
		}
	case "device list":
		// Every device of another node checked and ok (this node leaves
		// its own BMC to the others).
		ready = func() bool {
			_, out, _ := ctl("--socket", n.socket(), "device", "list")
			for _, o := range []string{"node1", "node2", "node3"} {
				if o != n.name && !regexp.MustCompile(`(?m)^`+o+`-bmc +ipmi +.* ok\b`).MatchString(out) {
					return false
				}
			}
			return true
		}
	case "history -v":
		ready = func() bool {
			_, out, _ := ctl("--socket", n.socket(), "history", "-v")
			return strings.Contains(out, fenced.name) && strings.Contains(out, "read back off")
		}
	case "history --timeline --last 1":
		// The failover: the fence of the killed node, then serving.
		ready = func() bool {
			_, out, _ := ctl("--socket", n.socket(), "history", "--timeline", "--last", "1")
			return strings.Contains(out, "Epoch 2: "+fenced.name+" →") && strings.Contains(out, "serving after") &&
				regexp.MustCompile(`(?m)^  fence +`+fenced.name+` +\+\d+ +\+\d+ .*read back off at \+\d+ ms`).MatchString(out)
		}
	}
	if len(args) == 2 && args[0] == "unfence" {
		code, out, stderr := ctl(append([]string{"--socket", n.socket()}, args...)...)
		if code != 0 {
			t.Fatalf("fencectl %s on %s: %d\n%s%s", strings.Join(args, " "), n.name, code, out, stderr)
		}
		// It boots, starts fenced and rejoins as a secondary.
		until(t, fenced.name+" back as a secondary", 30*time.Second, func() bool {
			st, ok := qsStatus(fenced)
			return ok && st.Self.Role == "secondary" && st.Primary.Node != "" && st.Primary.Node != fenced.name
		})
		return
	}
	until(t, "fencectl "+strings.Join(args, " ")+" on "+n.name+" to show what the quick start says", 90*time.Second, ready)
	if code, out, stderr := ctl(append([]string{"--socket", n.socket()}, args...)...); code != 0 {
		t.Fatalf("fencectl %s on %s: %d\n%s%s", strings.Join(args, " "), n.name, code, out, stderr)
	}
}

func qsStatus(n *qsNode) (api.Status, bool) {
	code, out, _ := ctl("--socket", n.socket(), "-o", "json", "status")
	var st api.Status
	return st, code == 0 && json.Unmarshal([]byte(out), &st) == nil
}

// needOCFAgents skips the test when resource-agents lacks one of names.
func needOCFAgents(t *testing.T, names ...string) {
	for _, n := range names {
		if _, err := os.Stat("/usr/lib/ocf/resource.d/heartbeat/" + n); err != nil {
			t.Skipf("resource-agents' %s is not installed", n)
		}
	}
}
