package ipmisim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// OpenIPMIConfig configures one ipmi_sim instance (one simulated node).
type OpenIPMIConfig struct {
	// Dir is where the configuration, state and logs go; it must exist.
	Dir string
	// Name identifies the instance (ipmi_sim "name"); default "bmc".
	Name     string
	Username string // default "admin"
	Password string // default "password"
	// Port is the UDP LAN port on 127.0.0.1; 0 picks a free one.
	Port int
	// HostCommand is what the "host" process runs (exec'd by a shell
	// script, so ipmi_sim's signals reach it); default "sleep 100000".
	HostCommand string
	// IgnoreSIGTERM makes the host ignore SIGTERM, so power-off only ends
	// it with SIGKILL after KillWait.
	IgnoreSIGTERM bool
	// KillWait is how long ipmi_sim waits after SIGTERM before SIGKILL
	// (whole seconds, default 2). PowerOffWait is its graceful-off wait
	// (default 2).
	KillWait     time.Duration
	PowerOffWait time.Duration
	// StartOff leaves the host powered off at start.
	StartOff bool
	// Binary is the ipmi_sim executable; default "ipmi_sim" from PATH.
	Binary string
}

// OpenIPMI is a running ipmi_sim and the host process it powers.
type OpenIPMI struct {
	Host    string // always 127.0.0.1
	Port    int
	cfg     OpenIPMIConfig
	cmd     *exec.Cmd
	pidFile string
	exited  chan struct{}
}

// simEmu is the ipmi_sim command file: one BMC at 0x20 with a SEL, as in
// SIMULATORS.md's recipe.
const simEmu = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
sel_enable 0x20 50 0x0a
mc_enable 0x20
`

// The serial 15 … codec VM line is what gives ipmi_sim chassis power
// control when no chassis_control program is configured; without it
// power-off answers "Invalid data field".
var lanConf = template.Must(template.New("lan.conf").Parse(`name "{{.Name}}"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {{.Port}}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user md2 md5 straight
    allowed_auths_operator md2 md5 straight
    allowed_auths_admin md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  serial 15 127.0.0.1 {{.SerialPort}} codec VM
  startcmd "{{.HostScript}}"
  startnow {{.StartNow}}
  poweroff_wait {{.PowerOffWait}}
  kill_wait {{.KillWait}}
  user 1 false ""          ""         user     1
  user 2 true  "{{.Username}}" "{{.Password}}" admin 10 md5 md2 straight
`))

// StartOpenIPMI starts ipmi_sim on 127.0.0.1 and waits until it answers.
// Close stops both ipmi_sim and its host process.
func StartOpenIPMI(ctx context.Context, cfg OpenIPMIConfig) (*OpenIPMI, error) {
	if cfg.Dir == "" {
		return nil, errors.New("ipmi_sim: Dir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "bmc"
	}
	if cfg.Username == "" {
		cfg.Username = "admin"
	}
	if cfg.Password == "" {
		cfg.Password = "password"
	}
	if cfg.HostCommand == "" {
		cfg.HostCommand = "sleep 100000"
	}
	if cfg.KillWait <= 0 {
		cfg.KillWait = 2 * time.Second
	}
	if cfg.PowerOffWait <= 0 {
		cfg.PowerOffWait = 2 * time.Second
	}
	if cfg.Binary == "" {
		cfg.Binary = "ipmi_sim"
	}
	for _, s := range []string{cfg.Name, cfg.Username, cfg.Password} {
		if strings.ContainsAny(s, "\"\n\\") {
			return nil, errors.New("ipmi_sim: name, username and password must not contain quotes, backslashes or newlines")
		}
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w (install the Debian package openipmi)", err)
	}
	if cfg.Port == 0 {
		if cfg.Port, err = freeUDPPort(); err != nil {
			return nil, err
		}
	}
	serialPort, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	stateDir := filepath.Join(cfg.Dir, "state")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	pidFile := filepath.Join(cfg.Dir, "host.pid")
	hostScript := filepath.Join(cfg.Dir, "host.sh")
	var script strings.Builder
	script.WriteString("#!/bin/sh\n# The simulated node: ipmi_sim starts it on power-on and signals it on power-off.\n")
	if cfg.IgnoreSIGTERM {
		script.WriteString("trap '' TERM\n")
	}
	fmt.Fprintf(&script, "echo $$ > %s\nexec %s\n", shellQuote(pidFile), cfg.HostCommand)
	if err := os.WriteFile(hostScript, []byte(script.String()), 0o700); err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	var conf bytes.Buffer
	err = lanConf.Execute(&conf, map[string]any{
		"Name": cfg.Name, "Port": cfg.Port, "SerialPort": serialPort, "HostScript": hostScript,
		"StartNow": !cfg.StartOff, "PowerOffWait": seconds(cfg.PowerOffWait), "KillWait": seconds(cfg.KillWait),
		"Username": cfg.Username, "Password": cfg.Password,
	})
	if err != nil {
		return nil, fmt.Errorf("ipmi_sim: lan.conf: %w", err)
	}
	confPath := filepath.Join(cfg.Dir, "lan.conf")
	emuPath := filepath.Join(cfg.Dir, "sim.emu")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	if err := os.WriteFile(emuPath, []byte(simEmu), 0o600); err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	logFile, err := os.Create(filepath.Join(cfg.Dir, "ipmi_sim.log"))
	if err != nil {
		return nil, fmt.Errorf("ipmi_sim: %w", err)
	}
	defer logFile.Close()

	cmd := exec.Command(bin, "-c", confPath, "-f", emuPath, "-s", stateDir, "-n")
	cmd.Dir = cfg.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a ^C to the test must not reach the simulator
	// before Close has stopped the host it owns.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ipmi_sim: start: %w", err)
	}
	s := &OpenIPMI{Host: "127.0.0.1", Port: cfg.Port, cfg: cfg, cmd: cmd, pidFile: pidFile, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx, 5*time.Second); err != nil {
		s.Close()
		log, _ := os.ReadFile(filepath.Join(cfg.Dir, "ipmi_sim.log"))
		return nil, fmt.Errorf("ipmi_sim: %w; log: %s", err, bytes.TrimSpace(log))
	}
	return s, nil
}

func (s *OpenIPMI) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		bound := udpPortBound(s.Port)
		hostUp := s.cfg.StartOff || s.HostPID() != 0
		if bound && hostUp {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited at start")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (port bound %v, host started %v)", limit, bound, hostUp)
		}
	}
}

// Dir is the instance directory (lan.conf, state, ipmi_sim.log, host.pid).
func (s *OpenIPMI) Dir() string { return s.cfg.Dir }

// HostPID returns the PID of the live host process, or 0 when the simulated
// node is down. A zombie (killed, not yet reaped by ipmi_sim) counts as down.
func (s *OpenIPMI) HostPID() int {
	b, err := os.ReadFile(s.pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !processAlive(pid) {
		return 0
	}
	return pid
}

// HostRunning reports whether the simulated node's process is alive.
func (s *OpenIPMI) HostRunning() bool { return s.HostPID() != 0 }

// Close stops ipmi_sim and then its host (ipmi_sim does not take the host
// down with it). It is safe to call more than once.
func (s *OpenIPMI) Close() error {
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(2 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	if pid := s.HostPID(); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 100 && processAlive(pid); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may itself
	// contain spaces or parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

func udpPortBound(port int) bool {
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return false
	}
	want := fmt.Sprintf(":%04X ", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		fields := strings.Fields(line)
		if len(fields) > 1 && strings.HasSuffix(fields[1]+" ", want) {
			return true
		}
	}
	return false
}

func freeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free UDP port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free TCP port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func seconds(d time.Duration) int {
	n := int((d + time.Second - 1) / time.Second)
	if n < 1 {
		n = 1
	}
	return n
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
