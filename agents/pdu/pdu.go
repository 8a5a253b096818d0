package pdu

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gosnmp/gosnmp"

	"github.com/fenced/fenced/agents"
)

func init() {
	agents.Register(Kind())
}

// Kind returns the "pdu" agent kind.
func Kind() agents.Kind {
	return agents.Kind{
		Name:        "pdu",
		Description: "Fence agent for switched PDUs over SNMP (APC, Eaton ePDU, Raritan PX, ServerTech Sentry)",
		Params:      params,
		New: func(p agents.Params, log *slog.Logger) (agents.Agent, error) {
			return New(p, log)
		},
	}
}

var params = []agents.Param{
	{Name: "ip", Description: "PDU address(es), comma separated: each plain plug is switched on every one of them", Type: "string", Required: true, Aliases: []string{"ipaddr"}},
	{Name: "ipport", Description: "UDP port of the SNMP agent", Type: "integer", Default: "161"},
	{Name: "plug", Description: "Outlet numbers or names, comma separated; HOST[:PORT]/OUTLET names the PDU of one outlet", Type: "string", Required: true, Aliases: []string{"port"}},
	{Name: "pdu_type", Description: "PDU family: " + strings.Join(vendorNames(), ", ") + " (auto: from sysObjectID)", Type: "string", Default: "auto"},
	{Name: "snmp_version", Description: "SNMP version: 1, 2c or 3", Type: "string", Default: "1"},
	{Name: "community", Description: "SNMP v1/v2c community (community_file reads it from a file)", Type: "string", Default: "private", Secret: true},
	{Name: "username", Description: "SNMPv3 user", Type: "string", Aliases: []string{"login"}},
	// passwd, when given with password, wins (as it always has here).
	{Name: "password", Description: "SNMPv3 authentication passphrase", Type: "string", Secret: true, Aliases: []string{"passwd"}, Precedence: agents.LastGiven},
	{Name: "snmp_sec_level", Description: "SNMPv3 security level: noAuthNoPriv, authNoPriv or authPriv (default from the secrets given)", Type: "string"},
	{Name: "snmp_auth_prot", Description: "SNMPv3 authentication protocol: MD5, SHA, SHA224, SHA256, SHA384, SHA512", Type: "string", Default: "SHA"},
	{Name: "snmp_priv_prot", Description: "SNMPv3 privacy protocol: DES, AES, AES192, AES256", Type: "string", Default: "AES"},
	{Name: "snmp_priv_passwd", Description: "SNMPv3 privacy passphrase", Type: "string", Secret: true},
	{Name: "snmp_context", Description: "SNMPv3 context name", Type: "string"},
	{Name: "shell_timeout", Description: "Wait for one SNMP answer (seconds); one retry follows", Type: "second", Default: "3"},
	{Name: "power_timeout", Description: "Wait for outlets to read back the requested state (seconds)", Type: "second", Default: "20"},
	{Name: "power_wait", Description: "Wait after switching before reading back, and between off and on in a reboot (seconds)", Type: "second", Default: "0"},
}

// pduAddr is one PDU with the outlets of the target it feeds.
type pduAddr struct {
	host    string
	port    uint16
	outlets []string // outlet numbers or names, as configured
}

func (p *pduAddr) String() string { return net.JoinHostPort(p.host, strconv.Itoa(int(p.port))) }

// op names the PDU and the target's outlets on it, for errors.
func (p *pduAddr) op() string {
	return "pdu " + p.String() + " outlets " + strings.Join(p.outlets, ",")
}

type config struct {
	pdus          []*pduAddr
	fixed         *vendor // nil: detect from sysObjectID
	version       gosnmp.SnmpVersion
	username      string
	secLevel      gosnmp.SnmpV3MsgFlags
	authProt      gosnmp.SnmpV3AuthProtocol
	privProt      gosnmp.SnmpV3PrivProtocol
	contextName   string
	timeout       time.Duration
	powerTimeout  time.Duration
	powerWait     time.Duration
	secretSources agents.Params // only the secret parameters and their _file/_script forms
}

// Agent switches a target's outlets on one or more PDUs. It is safe for
// concurrent use: every operation opens its own SNMP sessions.
type Agent struct {
	cfg config
	log *slog.Logger

	mu       sync.Mutex
	detected map[string]*vendor  // by PDU address
	names    map[string][]string // outlet names by PDU address, index = outlet-1
}

// New validates p and builds an agent; it does not touch the network.
func New(p agents.Params, log *slog.Logger) (*Agent, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := parseConfig(p)
	if err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, log: log, detected: map[string]*vendor{}, names: map[string][]string{}}, nil
}

func parseConfig(p agents.Params) (config, error) {
	var cfg config
	var errs []error
	bad := func(err error) { errs = append(errs, err) }
	p, perrs := agents.Resolve(p, params)
	for _, e := range perrs {
		bad(e)
	}

	port := 161
	if v, err := p.Int("ipport", 161); err != nil {
		bad(err)
	} else if v < 1 || v > 65535 {
		bad(fmt.Errorf("parameter ipport: %d is not a UDP port", v))
	} else {
		port = v
	}
	ips := p["ip"]
	var hosts []string
	for _, h := range strings.Split(ips, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	plugs := p["plug"]
	if plugs == "" {
		plugs = p["nodename"]
	}
	byAddr := map[string]*pduAddr{}
	add := func(host string, port int, outlet string) {
		a := &pduAddr{host: host, port: uint16(port)}
		if have, ok := byAddr[a.String()]; ok {
			a = have
		} else {
			byAddr[a.String()] = a
			cfg.pdus = append(cfg.pdus, a)
		}
		for _, o := range a.outlets {
			if o == outlet {
				return
			}
		}
		a.outlets = append(a.outlets, outlet)
	}
	nplugs := 0
	for _, entry := range strings.Split(plugs, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		nplugs++
		if i := strings.LastIndexByte(entry, '/'); i >= 0 {
			host, hport, outlet, err := parseQualified(entry[:i], entry[i+1:], port)
			if err != nil {
				bad(fmt.Errorf("parameter plug: %q: %w", entry, err))
				continue
			}
			add(host, hport, outlet)
			continue
		}
		if err := checkOutlet(entry); err != nil {
			bad(fmt.Errorf("parameter plug: %q: %w", entry, err))
			continue
		}
		if len(hosts) == 0 {
			bad(fmt.Errorf("parameter plug: %q names no PDU and ip is empty", entry))
			continue
		}
		for _, h := range hosts {
			add(h, port, entry)
		}
	}
	if nplugs == 0 {
		bad(errors.New("parameter plug: no outlet given"))
	}

	switch t := strings.ToLower(p.String("pdu_type", "auto")); t {
	case "auto":
	default:
		if v, ok := vendors[t]; ok {
			cfg.fixed = v
		} else {
			bad(fmt.Errorf("parameter pdu_type: %q is not one of %s", t, strings.Join(vendorNames(), ", ")))
		}
	}

	switch v := strings.ToLower(p.String("snmp_version", "1")); v {
	case "1":
		cfg.version = gosnmp.Version1
	case "2c", "2":
		cfg.version = gosnmp.Version2c
	case "3":
		cfg.version = gosnmp.Version3
	default:
		bad(fmt.Errorf("parameter snmp_version: %q is not 1, 2c or 3", v))
	}

	has := func(name string) bool {
		return p[name] != "" || p[name+"_file"] != "" || p[name+"_script"] != ""
	}
	cfg.secretSources = agents.Params{}
	for _, d := range params {
		if !d.Secret {
			continue
		}
		for _, suffix := range []string{"", "_file", "_script"} {
			if v, ok := p[d.Name+suffix]; ok {
				cfg.secretSources[d.Name+suffix] = v
			}
		}
		if f := cfg.secretSources[d.Name+"_file"]; f != "" {
			if _, err := os.Stat(f); err != nil {
				bad(fmt.Errorf("parameter %s_file: %w", d.Name, err))
			}
		}
	}

	if cfg.version == gosnmp.Version3 {
		user := p["username"]
		cfg.username = user
		if user == "" {
			bad(errors.New("parameter username: required with snmp_version 3"))
		}
		level := p.String("snmp_sec_level", "")
		if level == "" {
			switch {
			case has("snmp_priv_passwd"):
				level = "authPriv"
			case has("password"):
				level = "authNoPriv"
			default:
				level = "noAuthNoPriv"
			}
		}
		switch strings.ToLower(level) {
		case "noauthnopriv":
			cfg.secLevel = gosnmp.NoAuthNoPriv
		case "authnopriv":
			cfg.secLevel = gosnmp.AuthNoPriv
		case "authpriv":
			cfg.secLevel = gosnmp.AuthPriv
		default:
			bad(fmt.Errorf("parameter snmp_sec_level: %q is not noAuthNoPriv, authNoPriv or authPriv", level))
		}
		if cfg.secLevel&gosnmp.AuthNoPriv != 0 && !has("password") {
			bad(fmt.Errorf("parameter password: required with snmp_sec_level %s", level))
		}
		if cfg.secLevel == gosnmp.AuthPriv && !has("snmp_priv_passwd") {
			bad(fmt.Errorf("parameter snmp_priv_passwd: required with snmp_sec_level %s", level))
		}
		authProts := map[string]gosnmp.SnmpV3AuthProtocol{"MD5": gosnmp.MD5, "SHA": gosnmp.SHA, "SHA1": gosnmp.SHA, "SHA224": gosnmp.SHA224, "SHA256": gosnmp.SHA256, "SHA384": gosnmp.SHA384, "SHA512": gosnmp.SHA512}
		ap := strings.ToUpper(p.String("snmp_auth_prot", "SHA"))
		if v, ok := authProts[ap]; ok {
			cfg.authProt = v
		} else {
			bad(fmt.Errorf("parameter snmp_auth_prot: %q is not MD5, SHA, SHA224, SHA256, SHA384 or SHA512", ap))
		}
		privProts := map[string]gosnmp.SnmpV3PrivProtocol{"DES": gosnmp.DES, "AES": gosnmp.AES, "AES128": gosnmp.AES, "AES192": gosnmp.AES192, "AES256": gosnmp.AES256}
		pp := strings.ToUpper(p.String("snmp_priv_prot", "AES"))
		if v, ok := privProts[pp]; ok {
			cfg.privProt = v
		} else {
			bad(fmt.Errorf("parameter snmp_priv_prot: %q is not DES, AES, AES192 or AES256", pp))
		}
		cfg.contextName = p.String("snmp_context", "")
	}

	var err error
	if cfg.timeout, err = p.Seconds("shell_timeout", 3*time.Second); err != nil {
		bad(err)
	} else if cfg.timeout <= 0 {
		bad(errors.New("parameter shell_timeout: must be > 0"))
	}
	if cfg.powerTimeout, err = p.Seconds("power_timeout", 20*time.Second); err != nil {
		bad(err)
	} else if cfg.powerTimeout <= 0 {
		bad(errors.New("parameter power_timeout: must be > 0"))
	}
	if cfg.powerWait, err = p.Seconds("power_wait", 0); err != nil {
		bad(err)
	}
	if len(errs) > 0 {
		return config{}, fmt.Errorf("pdu: %w", errors.Join(errs...))
	}
	return cfg, nil
}

func parseQualified(hostport, outlet string, defPort int) (string, int, string, error) {
	if err := checkOutlet(outlet); err != nil {
		return "", 0, "", err
	}
	host, port := hostport, defPort
	if h, ps, err := net.SplitHostPort(hostport); err == nil {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, "", fmt.Errorf("%q is not a UDP port", ps)
		}
		host, port = h, n
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return "", 0, "", errors.New("empty PDU address")
	}
	return host, port, outlet, nil
}

func checkOutlet(o string) error {
	if o == "" {
		return errors.New("empty outlet")
	}
	if n, err := strconv.Atoi(o); err == nil && n < 1 {
		return fmt.Errorf("outlet %d: outlets are numbered from 1", n)
	}
	for _, r := range o {
		if r < 0x20 || r == 0x7f {
			return errors.New("outlet name has a control character")
		}
	}
	return nil
}
