// Package ipmisim runs IPMI BMC simulators on loopback for tests and the
// demo: go-ipmi's reference BMC embedded in-process (BMC), whose power hooks
// let a simulated node's process really die on power-off, and two
// independent implementations the IPMI agent is checked against as external
// processes: OpenIPMI's ipmi_sim (OpenIPMI) and a BMC on Debian's
// python3-pyghmi (Pyghmi), which can also play the quirks of real BMCs and
// hostile ones.
package ipmisim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/clock"
	"github.com/bougou/go-ipmi/pkg/hal"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"
	"github.com/bougou/go-ipmi/pkg/types"
)

// BMCConfig configures an embedded BMC.
type BMCConfig struct {
	// Addr is the UDP address to listen on; it must be a loopback address.
	// Empty means 127.0.0.1 on a free port.
	Addr     string
	Username string // default "admin"
	Password string // default "password"
	// CipherSuites advertised for RMCP+; default 3 and 17.
	CipherSuites []uint8
	// KG is the BMC key (Kg); empty means one-key logins (Kuid).
	KG []byte
	// PoweredOn is the initial power state.
	PoweredOn bool
	// MaxSessions is the size of the BMC's RMCP+ session table (default 4,
	// the minimum IPMI v2.0 requires): a login beyond it is refused with
	// "insufficient resources", as on a BMC whose slots are all taken.
	MaxSessions int
	// SessionTimeout is how long an idle session lives before the BMC
	// expires it (default 60s, IPMI v2.0's default).
	SessionTimeout time.Duration
	// OnPowerOff and OnPowerOn run when a client powers the chassis off or
	// on (power cycle runs both). They run synchronously before the command
	// is answered, so when OnPowerOff returns the node should be gone. A
	// non-nil error is answered as an IPMI failure and the state is kept.
	OnPowerOff func() error
	OnPowerOn  func() error
}

// userID is the slot of the BMC's one user.
const userID = 2

// BMC is a running go-ipmi reference BMC bound to loopback.
type BMC struct {
	bmc     *bmc.BMC
	addr    *net.UDPAddr
	srv     *server.Server
	conn    *udp.Conn
	chassis *chassis
	cancel  context.CancelFunc
	done    chan struct{}
}

// StartBMC starts a BMC serving until Close.
func StartBMC(cfg BMCConfig) (*BMC, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ipmisim: address %q: %w", cfg.Addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("ipmisim: address %q: must be a loopback IP", cfg.Addr)
	}
	if cfg.Username == "" {
		cfg.Username = "admin"
	}
	if cfg.Password == "" {
		cfg.Password = "password"
	}
	suites := []types.CipherSuiteID{3, 17}
	if len(cfg.CipherSuites) > 0 {
		suites = suites[:0]
		for _, s := range cfg.CipherSuites {
			suites = append(suites, types.CipherSuiteID(s))
		}
	}

	ch := &chassis{Chassis: &mock.Chassis{}, onOff: cfg.OnPowerOff, onOn: cfg.OnPowerOn}
	ch.on.Store(cfg.PoweredOn)
	h := &halWithChassis{HAL: mock.New(), chassis: ch}

	info := bmc.DeviceInfo{
		DeviceID: 0x20, DeviceRevision: 1, FirmwareMajor: 1, FirmwareMinor: 0,
		IPMIVersion: 0x20, ManufacturerID: 0x000157, ProductID: 0x0001,
	}
	var guid [16]byte
	copy(guid[:], "fenced-ipmisim\x00\x00")
	opts := []bmc.Option{bmc.WithClock(clock.Real), bmc.WithCipherSuites(suites)}
	if len(cfg.KG) > 0 {
		opts = append(opts, bmc.WithKG(cfg.KG))
	}
	b := bmc.New(info, guid, h, opts...)
	if cfg.MaxSessions > 0 || cfg.SessionTimeout > 0 {
		var so []bmc.SessionStoreOption
		if cfg.MaxSessions > 0 {
			so = append(so, bmc.WithMaxSessions(cfg.MaxSessions))
		}
		if cfg.SessionTimeout > 0 {
			so = append(so, bmc.WithInactivityTimeout(cfg.SessionTimeout))
		}
		// go-ipmi has no BMC option for it: the store is replaced before
		// the BMC serves, with the hook New gave the one it made.
		b.Sessions = bmc.NewSessionStoreWithOptions(clock.Real, so...)
		b.Sessions.SetOnRemove(b.SOL.DeactivateBySession)
	}
	user, err := b.Users.Add(userID, cfg.Username)
	if err != nil {
		return nil, fmt.Errorf("ipmisim: add user: %w", err)
	}
	user.SetPassword([]byte(cfg.Password))
	user.Enabled = true
	user.ChannelAccess[1] = bmc.UserChannelAccess{MaxPrivilege: bmc.PrivilegeLevelAdministrator, Enabled: true}

	conn, err := udp.Listen(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ipmisim: listen %s: %w", cfg.Addr, err)
	}
	s := &BMC{
		bmc:     b,
		addr:    conn.LocalAddr().(*net.UDPAddr),
		conn:    conn,
		chassis: ch,
		done:    make(chan struct{}),
	}
	s.srv = server.NewServer(b, &silenceableConn{Conn: conn, silent: &ch.silent})
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ctx)
	}()
	return s, nil
}

// Addr is the UDP address the BMC answers on.
func (s *BMC) Addr() *net.UDPAddr { return s.addr }

// Host and Port split Addr for agent parameters.
func (s *BMC) Host() string { return s.addr.IP.String() }

// Port is the UDP port.
func (s *BMC) Port() int { return s.addr.Port }

// PoweredOn reports the chassis power state.
func (s *BMC) PoweredOn() bool { return s.chassis.on.Load() }

// SetPower changes the power state without running the hooks (the node
// started or died on its own).
func (s *BMC) SetPower(on bool) { s.chassis.on.Store(on) }

// SetIgnorePowerOff makes the BMC acknowledge power-off (and power cycle)
// without changing anything: the "says success, never powers off" fault.
func (s *BMC) SetIgnorePowerOff(ignore bool) { s.chassis.ignoreOff.Store(ignore) }

// SetSilent makes the BMC stop answering (packets are read and dropped),
// as a hung or unreachable BMC does.
func (s *BMC) SetSilent(silent bool) { s.chassis.silent.Store(silent) }

// SetPassword changes the user's password, as an administrator (or an
// expiry policy) does on a real BMC: logins with the old one are refused
// from then on; sessions already open stay usable until they end, as on
// most BMCs.
func (s *BMC) SetPassword(password string) error {
	return s.bmc.Users.Update(userID, func(u *bmc.User) error {
		u.SetPassword([]byte(password))
		return nil
	})
}

// Sessions counts the BMC's RMCP+ sessions (active or being set up).
func (s *BMC) Sessions() int { return s.bmc.Sessions.Count() }

// PowerCommands counts the power-changing commands received.
func (s *BMC) PowerCommands() int { return int(s.chassis.commands.Load()) }

// Close stops the BMC and waits for its serve loop.
func (s *BMC) Close() error {
	s.cancel()
	err := s.srv.Close()
	<-s.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

type halWithChassis struct {
	*mock.HAL
	chassis *chassis
}

func (h *halWithChassis) Chassis() hal.ChassisHAL { return h.chassis }

// chassis overrides the mock's power handling with hooks and faults; the
// rest (boot flags, identify, ...) stays the mock's.
type chassis struct {
	*mock.Chassis
	mu        sync.Mutex // serialises power changes and their hooks
	on        atomic.Bool
	ignoreOff atomic.Bool
	silent    atomic.Bool
	commands  atomic.Int64
	onOff     func() error
	onOn      func() error
}

func (c *chassis) PowerState(context.Context) (bool, error) { return c.on.Load(), nil }

func (c *chassis) SetPower(_ context.Context, on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commands.Add(1)
	return c.setPowerLocked(on)
}

func (c *chassis) setPowerLocked(on bool) error {
	if !on && c.ignoreOff.Load() {
		return nil
	}
	if c.on.Load() == on {
		return nil
	}
	hook := c.onOn
	if !on {
		hook = c.onOff
	}
	if hook != nil {
		if err := hook(); err != nil {
			return err
		}
	}
	c.on.Store(on)
	return nil
}

func (c *chassis) PowerCycle(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commands.Add(1)
	if c.ignoreOff.Load() {
		return nil
	}
	if err := c.setPowerLocked(false); err != nil {
		return err
	}
	return c.setPowerLocked(true)
}

// silenceableConn drops every packet while silent is set.
type silenceableConn struct {
	*udp.Conn
	silent *atomic.Bool
}

func (c *silenceableConn) ReadFrom(buf []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.Conn.ReadFrom(buf)
		if err != nil || !c.silent.Load() {
			return n, addr, err
		}
	}
}
