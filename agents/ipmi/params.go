package ipmi

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/fenced/fenced/agents"
)

// Defaults, chosen for fencing: fail fast on a dead BMC so the stonith engine
// can move to the next level, but give a real chassis time to lose power.
const (
	defaultPort           = 623
	defaultCipher         = 17 // HMAC-SHA256 / AES-CBC-128: what current BMCs want
	defaultLoginTimeout   = 5 * time.Second
	defaultCommandTimeout = time.Second
	defaultRetries        = 2
	defaultPowerTimeout   = 20 * time.Second
	defaultPollInterval   = 100 * time.Millisecond
)

// params declares every parameter; names follow fence_ipmilan.
var params = []agents.Param{
	{Name: "ip", Description: "IP address or hostname of the BMC", Type: "string", Required: true, Aliases: []string{"ipaddr"}},
	{Name: "ipport", Description: "UDP port of the BMC", Type: "integer", Default: strconv.Itoa(defaultPort)},
	{Name: "username", Description: "BMC user name", Type: "string", Aliases: []string{"login"}},
	{Name: "password", Description: "BMC password (or password_file / password_script)", Type: "string", Secret: true, Aliases: []string{"passwd"}},
	{Name: "lanplus", Description: "Use IPMI v2.0 RMCP+ (lanplus); 0 selects IPMI v1.5 LAN", Type: "boolean", Default: "1"},
	{Name: "cipher", Description: "RMCP+ cipher suite (17 or 3 recommended; 0 means no authentication and needs allow_cipher0)", Type: "integer", Default: strconv.Itoa(defaultCipher)},
	{Name: "allow_cipher0", Description: "Allow cipher suite 0 (no authentication, no integrity, no encryption), or 1 and 6 (no integrity: replies are not signed)", Type: "boolean", Default: "0"},
	{Name: "privlvl", Description: "Privilege level: callback, user, operator or administrator", Type: "string", Default: "administrator"},
	{Name: "hexadecimal_kg", Description: "Hexadecimal BMC key (Kg) for IPMI v2.0 two-key logins", Type: "string", Secret: true},
	{Name: "method", Description: "Reboot method: onoff (a power cycle cannot be confirmed by read-back and is refused)", Type: "string", Default: "onoff"},
	{Name: "power_timeout", Description: "Seconds to wait for the power state to read back after on or off", Type: "second", Default: strconv.Itoa(int(defaultPowerTimeout / time.Second))},
	{Name: "login_timeout", Description: "Seconds allowed for establishing the session", Type: "second", Default: strconv.Itoa(int(defaultLoginTimeout / time.Second))},
	{Name: "command_timeout", Description: "Seconds to wait for each IPMI reply before retrying", Type: "second", Default: strconv.Itoa(int(defaultCommandTimeout / time.Second))},
	{Name: "command_retries", Description: "Retries of an IPMI request that got no reply", Type: "integer", Default: strconv.Itoa(defaultRetries)},
}

// config is the validated form of the parameters. Secrets are kept as
// unresolved parameters: password_script runs at operation time, not in New.
type config struct {
	host           string
	port           int
	username       string
	lanplus        bool
	cipher         types.CipherSuiteID
	privilege      types.PrivilegeLevel
	kg             []byte
	powerTimeout   time.Duration
	loginTimeout   time.Duration
	commandTimeout time.Duration
	retries        int
	pollInterval   time.Duration
	secrets        agents.Params // password, password_file, password_script
}

// parseConfig validates p, reporting every problem at once.
func parseConfig(p agents.Params, log *slog.Logger) (*config, error) {
	p, errs := agents.Resolve(p, params)
	c := &config{pollInterval: defaultPollInterval, secrets: agents.Params{}}

	c.host = strings.TrimSpace(p["ip"])
	if _, ok := p["ip"]; ok && c.host == "" {
		errs = append(errs, errors.New("parameter ip: empty"))
	} else if strings.ContainsAny(c.host, " /\t\n") {
		errs = append(errs, fmt.Errorf("parameter ip: %q is not a host name or address", c.host))
	}
	var err error
	if c.port, err = p.Int("ipport", defaultPort); err != nil {
		errs = append(errs, err)
	} else if c.port < 1 || c.port > 65535 {
		errs = append(errs, fmt.Errorf("parameter ipport: %d is not a port number", c.port))
	}
	c.username = p["username"]
	if len(c.username) > 16 {
		errs = append(errs, fmt.Errorf("parameter username: longer than 16 characters"))
	}
	for _, name := range []string{"password", "password_file", "password_script"} {
		if v, ok := p[name]; ok {
			c.secrets[name] = v
		}
	}
	if c.lanplus, err = p.Bool("lanplus", true); err != nil {
		errs = append(errs, err)
	}
	cipher, err := p.Int("cipher", defaultCipher)
	allow0, err0 := p.Bool("allow_cipher0", false)
	switch {
	case err != nil:
		errs = append(errs, err)
	case err0 != nil:
		errs = append(errs, err0)
	case cipher < 0 || cipher > 255:
		errs = append(errs, fmt.Errorf("parameter cipher: %d is not a cipher suite id", cipher))
	default:
		_, integ, _, ok := types.GetCipherSuiteAlgorithms(types.CipherSuiteID(cipher))
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("parameter cipher: suite %d is not supported (use 17 or 3)", cipher))
		case cipher == 0 && !allow0:
			errs = append(errs, errors.New("parameter cipher: suite 0 sends commands without authentication; refused unless allow_cipher0=1"))
		case integ == types.IntegrityAlg_None && !allow0:
			// Suites 1 and 6 authenticate the login but sign no reply:
			// anyone on the network could answer "power is off".
			errs = append(errs, fmt.Errorf("parameter cipher: suite %d signs no reply, so a power state read back could be forged; refused unless allow_cipher0=1 (use 17 or 3)", cipher))
		case cipher == 0 && log != nil:
			log.Warn("ipmi cipher suite 0 allowed: the BMC accepts commands without authentication", "addr", c.host)
		case integ == types.IntegrityAlg_None && log != nil:
			log.Warn("ipmi cipher suite without integrity allowed: the BMC's replies are not signed", "cipher", cipher, "addr", c.host)
		}
		c.cipher = types.CipherSuiteID(cipher)
	}
	switch lvl := strings.ToLower(p.String("privlvl", "administrator")); lvl {
	case "callback":
		c.privilege = types.PrivilegeLevelCallback
	case "user":
		c.privilege = types.PrivilegeLevelUser
	case "operator":
		c.privilege = types.PrivilegeLevelOperator
	case "administrator", "admin":
		c.privilege = types.PrivilegeLevelAdministrator
	default:
		errs = append(errs, fmt.Errorf("parameter privlvl: %q is not callback, user, operator or administrator", lvl))
	}
	for _, name := range []string{"hexadecimal_kg_file", "hexadecimal_kg_script"} {
		if _, ok := p[name]; ok {
			errs = append(errs, fmt.Errorf("parameter %s: not supported; give hexadecimal_kg on stdin", name))
		}
	}
	if kg, ok := p["hexadecimal_kg"]; ok && kg != "" {
		b, err := hex.DecodeString(strings.TrimPrefix(strings.TrimSpace(kg), "0x"))
		switch {
		case err != nil:
			// Never echo the value: it is a key.
			errs = append(errs, errors.New("parameter hexadecimal_kg: not hexadecimal"))
		case len(b) > 20:
			errs = append(errs, errors.New("parameter hexadecimal_kg: longer than 20 bytes"))
		case !c.lanplus:
			errs = append(errs, errors.New("parameter hexadecimal_kg: needs lanplus (Kg is an IPMI v2.0 key)"))
		default:
			c.kg = b
		}
	}
	switch m := strings.ToLower(p.String("method", "onoff")); m {
	case "onoff":
	case "cycle":
		errs = append(errs, errors.New("parameter method: cycle is refused: a BMC may acknowledge a power cycle before the node ever lost power, and no read-back can confirm it; use onoff"))
	default:
		errs = append(errs, fmt.Errorf("parameter method: %q is not onoff", m))
	}
	durations := []struct {
		name string
		def  time.Duration
		dst  *time.Duration
	}{
		{"power_timeout", defaultPowerTimeout, &c.powerTimeout},
		{"login_timeout", defaultLoginTimeout, &c.loginTimeout},
		{"command_timeout", defaultCommandTimeout, &c.commandTimeout},
	}
	for _, d := range durations {
		v, err := p.Seconds(d.name, d.def)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v <= 0 {
			errs = append(errs, fmt.Errorf("parameter %s: must be > 0", d.name))
			continue
		}
		*d.dst = v
	}
	if c.retries, err = p.Int("command_retries", defaultRetries); err != nil {
		errs = append(errs, err)
	} else if c.retries < 0 || c.retries > 10 {
		errs = append(errs, fmt.Errorf("parameter command_retries: %d is not between 0 and 10", c.retries))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// addr is the BMC address as shown in errors and logs.
func (c *config) addr() string { return net.JoinHostPort(c.host, strconv.Itoa(c.port)) }
