package nemesis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// BMC kinds; node i gets bmcKinds[i%3].
const (
	bmcOpenIPMI = "ipmi_sim"
	bmcGoIPMI   = "go-ipmi"
	bmcRedfish  = "redfish"
)

var bmcKinds = []string{bmcOpenIPMI, bmcGoIPMI, bmcRedfish}

// node is one simulated machine with its BMC.
type node struct {
	i        int
	name, ns string
	ip       string
	dn       *devcluster.Node // config, socket and log paths
	specPath string
	spec     MachineSpec
	cl       *cluster

	bmcKind string
	bmcPort int
	faults  *relayFaults // the relay in front of the BMC
	closers []func()

	gbmc  *ipmisim.BMC      // go-ipmi
	rsim  *redfishsim.Sim   // redfish
	osim  *ipmisim.OpenIPMI // ipmi_sim
	line  *delayLine        // slow link
	rules netRules          // nftables state of its namespace

	pmu    sync.Mutex // serialises power operations
	mu     sync.Mutex // guards the fields below
	proc   *exec.Cmd  // the `nemesis machine` process, for BMCs in this process
	done   chan struct{}
	paused bool
	boots  int
}

// device is the node's fence device in the configuration: its BMC, as the
// nodes reach it through the relay on the switch.
func (n *node) device(mgmt, pwFile string) config.Device {
	p := map[string]string{"ip": mgmt, "ipport": strconv.Itoa(n.bmcPort), "username": "admin", "password_file": pwFile}
	switch n.bmcKind {
	case bmcRedfish:
		p["plain_http"] = "1"
		p["power_timeout"], p["login_timeout"], p["request_timeout"] = "5", "2", "2"
	case bmcOpenIPMI:
		// ipmi_sim speaks cipher suites 0-3 and 6 only.
		p["lanplus"], p["cipher"] = "1", "3"
		p["power_timeout"], p["login_timeout"], p["command_timeout"] = "5", "2", "1"
	default:
		p["lanplus"], p["cipher"] = "1", "17"
		p["power_timeout"], p["login_timeout"], p["command_timeout"] = "5", "2", "1"
	}
	agent := "ipmi"
	if n.bmcKind == bmcRedfish {
		agent = "redfish"
	}
	return config.Device{Agent: agent, Params: p}
}

// startBMC starts the node's BMC and its relay; the BMC powers the machine
// on.
func (n *node) startBMC(ctx context.Context, mgmt string) error {
	cl := n.cl
	listen := net.JoinHostPort(mgmt, strconv.Itoa(n.bmcPort))
	switch n.bmcKind {
	case bmcOpenIPMI:
		dir := cl.path("bmc", n.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := writeSpec(n.specPath, &n.spec); err != nil {
			return err
		}
		s, err := ipmisim.StartOpenIPMI(ctx, ipmisim.OpenIPMIConfig{Dir: dir, Name: n.name, Password: devcluster.BMCPassword,
			HostCommand: shq(cl.opts.Nemesis) + " machine --spec " + shq(n.specPath), KillWait: 3 * time.Second})
		if err != nil {
			return err
		}
		n.osim = s
		n.closers = append(n.closers, func() { s.Close() })
		r, err := startUDPRelay(cl.net.Switch(), listen, net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
		if err != nil {
			return err
		}
		n.faults = &r.relayFaults
		n.closers = append(n.closers, r.Close)
	case bmcGoIPMI:
		b, err := ipmisim.StartBMC(ipmisim.BMCConfig{Password: devcluster.BMCPassword, PoweredOn: true,
			OnPowerOff: func() error { n.powerOffOwned(); return nil },
			OnPowerOn:  func() error { return n.startOwned() }})
		if err != nil {
			return err
		}
		n.gbmc = b
		n.closers = append(n.closers, func() { b.Close() })
		r, err := startUDPRelay(cl.net.Switch(), listen, b.Addr().String())
		if err != nil {
			return err
		}
		n.faults = &r.relayFaults
		n.closers = append(n.closers, r.Close)
		if err := n.startOwned(); err != nil {
			return err
		}
	case bmcRedfish:
		sim, err := redfishsim.New(redfishsim.Options{
			Users:      []redfishsim.User{{Name: "admin", Password: devcluster.BMCPassword, Role: redfishsim.RoleAdministrator}},
			OnPowerOff: func(string) { n.powerOffOwned() },
			OnPowerOn:  func(string) { n.startOwned() },
		})
		if err != nil {
			return err
		}
		n.rsim = sim
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
		served := make(chan struct{})
		go func() { defer close(served); srv.Serve(ln) }()
		n.closers = append(n.closers, func() { srv.Close(); <-served; sim.Close() })
		r, err := startTCPRelay(cl.net.Switch(), listen, ln.Addr().String())
		if err != nil {
			return err
		}
		n.faults = &r.relayFaults
		n.closers = append(n.closers, r.Close)
		if err := n.startOwned(); err != nil {
			return err
		}
	}
	return nil
}

// canLie reports whether the BMC can acknowledge a power-off and stay on.
func (n *node) canLie() bool { return n.bmcKind != bmcOpenIPMI }

// setLying makes the BMC acknowledge power-off without powering off (its
// read-back then says on).
func (n *node) setLying(lie bool) {
	switch {
	case n.gbmc != nil:
		n.gbmc.SetIgnorePowerOff(lie)
	case n.rsim != nil:
		f := n.rsim.Faults()
		f.ResetIgnored = lie
		n.rsim.SetFaults(f)
	}
}

// startOwned starts the machine of a BMC served by this process (a power-on).
func (n *node) startOwned() error {
	n.pmu.Lock()
	defer n.pmu.Unlock()
	if n.helper() != 0 {
		return nil // already on
	}
	if err := writeSpec(n.specPath, &n.spec); err != nil {
		return err
	}
	logf, err := logTo(n.dn.Log)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.cl.opts.Nemesis, "machine", "--spec", n.specPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.boots++
	n.proc, n.done, n.paused = cmd, done, false
	n.mu.Unlock()
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	n.cl.event("power", n.name, "on", fmt.Sprintf("clock offsets monotonic %+ds boottime %+ds", n.spec.MonotonicOffset, n.spec.BoottimeOffset))
	return nil
}

// powerOffOwned is the BMC's power-off: the machine and every process of
// it, before the BMC answers.
func (n *node) powerOffOwned() {
	n.pmu.Lock()
	defer n.pmu.Unlock()
	n.mu.Lock()
	proc, done := n.proc, n.done
	n.mu.Unlock()
	if proc == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		proc.Process.Kill()
		<-done
	}
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	n.cl.event("power", n.name, "off", "by its BMC")
}

// helper is the PID of the `nemesis machine` process, or 0 when off.
func (n *node) helper() int {
	if n.osim != nil {
		return n.osim.HostPID()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	select {
	case <-n.done:
		return 0
	default:
		return n.proc.Process.Pid
	}
}

func (n *node) on() bool { return n.helper() != 0 }

func (n *node) procs() machineProcs {
	h := n.helper()
	if h == 0 {
		return machineProcs{}
	}
	return machineProcs{helper: h, init: initOf(h)}
}

// crash kills every process of the machine at once (a power loss the BMC
// did not cause) and waits until the machine is off.
func (n *node) crash() error {
	p := n.procs()
	if p.helper == 0 {
		return nil
	}
	if p.init > 0 {
		syscall.Kill(p.init, syscall.SIGKILL)
	} else {
		syscall.Kill(p.helper, syscall.SIGTERM)
	}
	deadline := time.Now().Add(15 * time.Second)
	for n.on() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: machine still on 15s after its init was killed", n.name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	switch {
	case n.gbmc != nil:
		n.gbmc.SetPower(false)
	case n.rsim != nil:
		n.rsim.SetPowerState("", "Off")
	}
	n.cl.event("power", n.name, "off", "crash")
	return nil
}

// powerOn powers the machine on as an administrator would, with clock
// offsets for this boot, and waits until it runs.
func (n *node) powerOn(ctx context.Context, mono, boot int64) error {
	if n.on() {
		return nil
	}
	n.spec.MonotonicOffset, n.spec.BoottimeOffset = mono, boot
	switch {
	case n.osim != nil:
		if err := writeSpec(n.specPath, &n.spec); err != nil {
			return err
		}
		for try := 0; try < 20 && !n.on(); try++ {
			// ipmi_sim may still read on for a moment after its host died;
			// a power-on then does nothing: ask again.
			cmd := exec.CommandContext(ctx, "ipmitool", "-I", "lanplus", "-H", n.osim.Host, "-p", strconv.Itoa(n.osim.Port),
				"-U", "admin", "-E", "-C", "3", "-N", "1", "-R", "2", "chassis", "power", "on")
			cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+devcluster.BMCPassword)
			cmd.Run()
			for i := 0; i < 20 && !n.on(); i++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if !n.on() {
			return fmt.Errorf("%s: ipmi_sim did not power the machine on", n.name)
		}
		n.mu.Lock()
		n.boots++
		n.paused = false
		n.mu.Unlock()
		n.cl.event("power", n.name, "on", fmt.Sprintf("clock offsets monotonic %+ds boottime %+ds", mono, boot))
		return nil
	case n.gbmc != nil:
		if err := n.startOwned(); err != nil {
			return err
		}
		n.gbmc.SetPower(true)
	case n.rsim != nil:
		if err := n.startOwned(); err != nil {
			return err
		}
		n.rsim.SetPowerState("", "On")
	}
	return nil
}

// freeze stops every process of the machine (SIGSTOP), as a hung kernel or
// a long VM pause would.
func (n *node) freeze() error {
	p := n.procs()
	if p.init == 0 {
		return fmt.Errorf("%s: not running", n.name)
	}
	n.mu.Lock()
	n.paused = true
	n.mu.Unlock()
	if err := p.signalAll(syscall.SIGSTOP); err != nil {
		return err
	}
	for i := 0; i < 100 && !p.stopped(); i++ {
		p.signalAll(syscall.SIGSTOP)
		time.Sleep(5 * time.Millisecond)
	}
	n.cl.event("pause", n.name, "stopped", "")
	return nil
}

func (n *node) thaw() {
	n.mu.Lock()
	was := n.paused
	n.paused = false
	n.mu.Unlock()
	if p := n.procs(); p.init != 0 && was {
		p.signalAll(syscall.SIGCONT)
		n.cl.event("pause", n.name, "resumed", "")
	}
}

func (n *node) isPaused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// killDaemon SIGKILLs fenced only: the machine and what its storage hooks
// started keep running.
func (n *node) killDaemon() error {
	p := n.procs()
	pid := p.daemonPid(n.cl.opts.Fenced)
	if pid == 0 {
		return fmt.Errorf("%s: fenced not running", n.name)
	}
	n.cl.event("daemon", n.name, "SIGKILL", "")
	return syscall.Kill(pid, syscall.SIGKILL)
}

// stopDaemon stops fenced gracefully (SIGTERM) and waits for it to exit.
func (n *node) stopDaemon(limit time.Duration) error {
	p := n.procs()
	pid := p.daemonPid(n.cl.opts.Fenced)
	if pid == 0 {
		return fmt.Errorf("%s: fenced not running", n.name)
	}
	n.cl.event("daemon", n.name, "SIGTERM", "")
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(limit)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: fenced still running %v after SIGTERM", n.name, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// restartDaemon starts fenced again on the running machine.
func (n *node) restartDaemon() error {
	p := n.procs()
	if p.init == 0 {
		return errors.New(n.name + ": machine off")
	}
	n.cl.event("daemon", n.name, "start", "")
	return syscall.Kill(p.init, syscall.SIGHUP)
}

func processAlive(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func (n *node) close() {
	n.crash()
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
}
