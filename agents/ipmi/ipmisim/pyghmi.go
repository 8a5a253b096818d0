package ipmisim

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pyghmiScript is the BMC itself (pyghmi_bmc.py), written to the
// instance's directory at start.
//
//go:embed pyghmi_bmc.py
var pyghmiScript []byte

// PyghmiConfig configures one BMC on Debian's python3-pyghmi (the library
// under OpenStack VirtualBMC), a second IPMI implementation nobody on this
// project wrote. The zero value is an honest BMC offering suites 17 and 3
// with a chassis powered on; each quirk below is what some BMC does.
type PyghmiConfig struct {
	// Dir is where the script and its log go; empty means a temporary
	// directory, removed by Close.
	Dir      string
	Username string // default "admin"
	Password string // default "password"
	// StartOff starts the chassis powered off.
	StartOff bool
	// OffDelay: after power-off the chassis still reads on this long (the
	// state of many BMCs lags the command).
	OffDelay time.Duration

	// MalformedDeviceID answers Get Device ID with pyghmi's own 14 bytes
	// (manufacturer and product IDs of 4 bytes each) instead of the 15 of
	// the specification; go-ipmi refuses it ("unpacked data is too short
	// (14/15)").
	MalformedDeviceID bool
	// NoSuite17 offers suite 3 only: an Open Session for suite 17 is
	// refused (RMCP+ status 0x11, no matching cipher suite).
	NoSuite17 bool

	// The hostile modes, which a console must refuse.

	// NoIntegrity: replies inside an established session carry no
	// integrity trailer and are not encrypted (the payload type's
	// authenticated and encrypted bits clear), with the true content.
	NoIntegrity bool
	// BadIntegrity: replies inside an established session carry a wrong
	// AuthCode.
	BadIntegrity bool
	// HostileCommands limits NoIntegrity and BadIntegrity to the replies
	// to these requests; empty means every reply in the session,
	// Set Session Privilege Level's included (so the login itself meets
	// it).
	HostileCommands []Command
	// ForgeOff: a hostile reply to Get Chassis Status (NoIntegrity or
	// BadIntegrity, as HostileCommands selects) says the power is off
	// whatever the chassis is, as a forger on the management network
	// would, to fake a fence's read-back.
	ForgeOff bool
	// Downgrade answers an Open Session for suite 17 with suite 3's
	// algorithms (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) and runs the
	// session with them; pyghmi on its own does this.
	Downgrade bool
	// SkipPassword: RAKP 2 carries no key exchange authentication code
	// (the BMC never shows it knows the password), while Open Session
	// answered the algorithms asked for; RAKP 3's code is not checked.
	SkipPassword bool
	// RAKPNone answers Open Session with RAKP-none as the authentication
	// algorithm, whatever was asked, and RAKP 2 without a code (which
	// RAKP-none allows).
	RAKPNone bool
	// SessionLimit is how many sessions may be open at once (0: no
	// limit); a further Open Session is answered "insufficient resources"
	// (RMCP+ status 0x01). SessionTimeout is how long a session lives
	// without a request (default 60 s, the specification's).
	SessionLimit   int
	SessionTimeout time.Duration

	// Python is the interpreter; default /usr/bin/python3 (Debian's, which
	// python3-pyghmi installs for), else python3 from PATH.
	Python string
}

// Command names one IPMI request by network function and command.
type Command struct{ NetFn, Cmd uint8 }

// Requests the hostile modes can be limited to.
var (
	CmdGetChassisStatus    = Command{0x00, 0x01}
	CmdChassisControl      = Command{0x00, 0x02}
	CmdGetDeviceID         = Command{0x06, 0x01}
	CmdSetSessionPrivilege = Command{0x06, 0x3b}
	CmdCloseSession        = Command{0x06, 0x3c}
)

// ReplyQuirk is how the BMC frames its replies inside a session, changed
// at run time with SetReplyQuirk (a session opened honestly, then forged
// replies).
type ReplyQuirk string

const (
	ReplyHonest       ReplyQuirk = "honest"
	ReplyNoIntegrity  ReplyQuirk = "no-integrity"
	ReplyBadIntegrity ReplyQuirk = "bad-integrity"
)

// PyghmiStats is what the BMC counted since it started.
type PyghmiStats struct {
	Power         bool           `json:"power"`
	Sessions      int            `json:"sessions"`       // open now (not expired)
	Established   int            `json:"established"`    // sessions that completed RAKP
	BySuite       map[string]int `json:"by_suite"`       // established sessions by cipher suite asked for
	PowerCommands int            `json:"power_commands"` // chassis control requests
	// HostileReplies counts the replies sent without integrity or with a
	// wrong AuthCode: a test that expects a refusal checks that the BMC
	// did misbehave.
	HostileReplies  int        `json:"hostile_replies"`
	ForgedOff       int        `json:"forged_off"`       // status replies forged to say off
	Downgraded      int        `json:"downgraded"`       // Open Sessions answered with other algorithms
	SkippedPassword int        `json:"skipped_password"` // RAKP 2s without a code
	Refused         int        `json:"refused"`          // Open Sessions refused (suite, limit)
	LastRefusal     string     `json:"last_refusal"`
	ReplyQuirk      ReplyQuirk `json:"reply_quirk"`
}

// Pyghmi is a running pyghmi BMC on 127.0.0.1.
type Pyghmi struct {
	addr    *net.UDPAddr
	dir     string
	tempDir bool
	cmd     *exec.Cmd
	exited  chan struct{}

	mu  sync.Mutex // one control exchange at a time
	in  *os.File   // the script's stdin
	out *os.File   // its stdout
	rd  *bufio.Reader

	closeOnce sync.Once
}

// StartPyghmi starts the BMC on a free port of 127.0.0.1 and waits until
// it answers. Close stops it; so does the end of the test process (the
// script exits when its stdin closes).
func StartPyghmi(ctx context.Context, cfg PyghmiConfig) (*Pyghmi, error) {
	if cfg.Username == "" {
		cfg.Username = "admin"
	}
	if cfg.Password == "" {
		cfg.Password = "password"
	}
	if strings.ContainsAny(cfg.Username, " \t\n") {
		return nil, errors.New("pyghmi: username must not contain blanks")
	}
	python, err := findPython(cfg.Python)
	if err != nil {
		return nil, err
	}
	p := &Pyghmi{dir: cfg.Dir, exited: make(chan struct{})}
	if p.dir == "" {
		if p.dir, err = os.MkdirTemp("", "pyghmi-bmc-"); err != nil {
			return nil, fmt.Errorf("pyghmi: %w", err)
		}
		p.tempDir = true
	}
	fail := func(err error) (*Pyghmi, error) {
		if p.tempDir {
			os.RemoveAll(p.dir)
		}
		return nil, err
	}
	script := filepath.Join(p.dir, "pyghmi_bmc.py")
	if err := os.WriteFile(script, pyghmiScript, 0o600); err != nil {
		return fail(fmt.Errorf("pyghmi: %w", err))
	}
	args := []string{script, "--user", cfg.Username}
	flag := func(on bool, name string) {
		if on {
			args = append(args, name)
		}
	}
	flag(cfg.StartOff, "--start-off")
	flag(cfg.MalformedDeviceID, "--malformed-device-id")
	flag(cfg.NoSuite17, "--no-suite17")
	flag(cfg.NoIntegrity, "--no-integrity")
	flag(cfg.BadIntegrity, "--bad-integrity")
	flag(cfg.ForgeOff, "--forge-off")
	flag(cfg.Downgrade, "--downgrade")
	flag(cfg.SkipPassword, "--skip-password")
	flag(cfg.RAKPNone, "--rakp-none")
	for _, c := range cfg.HostileCommands {
		args = append(args, "--hostile-only", fmt.Sprintf("%02x:%02x", c.NetFn, c.Cmd))
	}
	if cfg.OffDelay > 0 {
		args = append(args, "--off-delay", strconv.FormatFloat(cfg.OffDelay.Seconds(), 'f', 3, 64))
	}
	if cfg.SessionLimit > 0 {
		args = append(args, "--session-limit", strconv.Itoa(cfg.SessionLimit))
	}
	if cfg.SessionTimeout > 0 {
		args = append(args, "--session-timeout", strconv.FormatFloat(cfg.SessionTimeout.Seconds(), 'f', 3, 64))
	}

	logPath := filepath.Join(p.dir, "pyghmi_bmc.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail(fmt.Errorf("pyghmi: %w", err))
	}
	defer logFile.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("pyghmi: %w", err))
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return fail(fmt.Errorf("pyghmi: %w", err))
	}
	cmd := exec.Command(python, args...)
	cmd.Dir = p.dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, logFile
	// The password through the environment, not the arguments (ps).
	cmd.Env = append(os.Environ(), "PYGHMI_BMC_PASSWORD="+cfg.Password, "PYTHONDONTWRITEBYTECODE=1")
	// Its own process group (a ^C to the test goes to the test), and
	// killed with the test process if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return fail(fmt.Errorf("pyghmi: start %s: %w", python, err))
	}
	p.cmd, p.in, p.out, p.rd = cmd, inW, outR, bufio.NewReader(outR)
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()

	port, err := p.waitReady(ctx, 10*time.Second)
	if err != nil {
		p.Close()
		log, _ := os.ReadFile(logPath)
		msg := fmt.Sprintf("pyghmi: %v; log: %s", err, bytes.TrimSpace(log))
		if code := cmd.ProcessState; code != nil && code.ExitCode() == 3 {
			msg = "pyghmi: python3-pyghmi is not installed (install the Debian package python3-pyghmi): " + string(bytes.TrimSpace(log))
		}
		return nil, errors.New(msg)
	}
	p.addr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	return p, nil
}

// findPython returns the interpreter to run: the one asked for, else
// Debian's (a python3 earlier in PATH, such as pyenv's, may lack the
// Debian module), else python3 from PATH.
func findPython(want string) (string, error) {
	if want != "" {
		path, err := exec.LookPath(want)
		if err != nil {
			return "", fmt.Errorf("pyghmi: %w", err)
		}
		return path, nil
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3", nil
	}
	path, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("pyghmi: %w (install the Debian packages python3 and python3-pyghmi)", err)
	}
	return path, nil
}

// waitReady reads the script's "ready PORT" line.
func (p *Pyghmi) waitReady(ctx context.Context, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	line, err := p.readLine(deadline)
	if err != nil {
		select {
		case <-p.exited:
			return 0, fmt.Errorf("exited at start")
		case <-time.After(100 * time.Millisecond):
		}
		return 0, fmt.Errorf("not ready: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "ready" {
		return 0, fmt.Errorf("unexpected first line %q", line)
	}
	port, err := strconv.Atoi(f[1])
	if err != nil || port <= 0 || port > 65535 {
		return 0, fmt.Errorf("unexpected first line %q", line)
	}
	return port, nil
}

func (p *Pyghmi) readLine(deadline time.Time) (string, error) {
	if err := p.out.SetReadDeadline(deadline); err != nil {
		return "", err
	}
	line, err := p.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// control sends one command and returns its answer line.
func (p *Pyghmi) control(command string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return "", errors.New("pyghmi: the BMC has exited")
	default:
	}
	if _, err := p.in.WriteString(command + "\n"); err != nil {
		return "", fmt.Errorf("pyghmi: %s: %w", command, err)
	}
	line, err := p.readLine(time.Now().Add(5 * time.Second))
	if err != nil {
		return "", fmt.Errorf("pyghmi: %s: %w", command, err)
	}
	if strings.HasPrefix(line, "error") {
		return "", fmt.Errorf("pyghmi: %s: %s", command, line)
	}
	return line, nil
}

// Addr is the UDP address the BMC answers on.
func (p *Pyghmi) Addr() *net.UDPAddr { return p.addr }

// Host is always 127.0.0.1.
func (p *Pyghmi) Host() string { return p.addr.IP.String() }

// Port is the BMC's UDP port.
func (p *Pyghmi) Port() int { return p.addr.Port }

// Dir holds the script and its log (pyghmi_bmc.log).
func (p *Pyghmi) Dir() string { return p.dir }

// Stats asks the BMC what it counted.
func (p *Pyghmi) Stats() (PyghmiStats, error) {
	var st PyghmiStats
	line, err := p.control("status")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		return st, fmt.Errorf("pyghmi: status %q: %w", line, err)
	}
	return st, nil
}

// PoweredOn reads the chassis state as a console would (true during
// OffDelay after a power-off).
func (p *Pyghmi) PoweredOn() (bool, error) {
	st, err := p.Stats()
	return st.Power, err
}

// SetPower sets the chassis state, as if someone pressed the button.
func (p *Pyghmi) SetPower(on bool) error {
	state := "off"
	if on {
		state = "on"
	}
	_, err := p.control("power " + state)
	return err
}

// SetReplyQuirk changes how replies inside sessions are framed from now
// on (HostileCommands still applies).
func (p *Pyghmi) SetReplyQuirk(q ReplyQuirk) error {
	_, err := p.control("reply " + string(q))
	return err
}

// Close stops the BMC (its stdin closes, then SIGKILL if it lingers) and
// removes a temporary directory. It is safe to call more than once.
func (p *Pyghmi) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.in.Close()
		p.mu.Unlock()
		select {
		case <-p.exited:
		case <-time.After(time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		p.out.Close()
		if p.tempDir {
			os.RemoveAll(p.dir)
		}
	})
	return nil
}
