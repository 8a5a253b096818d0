package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/agents"
)

// Defaults, chosen for fencing: fail fast on a dead BMC so the stonith engine
// can move on, but give a real server time to lose power.
const (
	defaultPort           = 443
	defaultRedfishURI     = "/redfish/v1"
	defaultPowerTimeout   = 20 * time.Second
	defaultLoginTimeout   = 5 * time.Second
	defaultRequestTimeout = 10 * time.Second
	logoutTimeout         = 5 * time.Second
	// Polls start fast (a BMC that powers off at once answers in one round
	// trip) and back off to pollMax so a slow BMC is not flooded.
	pollMin = 25 * time.Millisecond
	pollMax = 500 * time.Millisecond
)

// params declares every parameter; names follow fence_redfish where it has one.
var params = []agents.Param{
	{Name: "ip", Description: "IP address or hostname of the BMC", Type: "string", Required: true, Aliases: []string{"ipaddr"}},
	{Name: "ipport", Description: "TCP port of the BMC's Redfish service", Type: "integer", Default: strconv.Itoa(defaultPort)},
	{Name: "username", Description: "BMC user name", Type: "string", Required: true, Aliases: []string{"login"}},
	{Name: "password", Description: "BMC password (or password_file / password_script)", Type: "string", Required: true, Secret: true, Aliases: []string{"passwd"}},
	{Name: "systems_uri", Description: "URI of the ComputerSystem to fence, e.g. /redfish/v1/Systems/System.Embedded.1 (default: the only system)", Type: "string", Aliases: []string{"systems-uri"}},
	{Name: "redfish_uri", Description: "Base URI of the Redfish service (only /redfish/v1 is supported)", Type: "string", Default: defaultRedfishURI, Aliases: []string{"redfish-uri"}},
	{Name: "ssl", Description: "Use HTTPS (always on unless plain_http; kept for fence_redfish compatibility)", Type: "boolean", Default: "1"},
	{Name: "ssl_secure", Description: "Verify the BMC's certificate (the default; kept for fence_redfish compatibility)", Type: "boolean", Default: "1"},
	{Name: "ssl_insecure", Description: "Do not verify the BMC's TLS certificate (logged as a warning)", Type: "boolean", Default: "0"},
	{Name: "ca_file", Description: "PEM file of the CA (or self-signed certificate) that signed the BMC's certificate", Type: "string"},
	{Name: "plain_http", Description: "Speak plain HTTP instead of HTTPS (simulators only)", Type: "boolean", Default: "0"},
	{Name: "basic_auth", Description: "Use HTTP Basic authentication on every request instead of a Redfish session (chosen by itself, and logged, when the BMC has no session service)", Type: "boolean", Default: "0"},
	{Name: "power_timeout", Description: "Seconds to wait for PowerState to read back Off (or On) after a reset", Type: "second", Default: strconv.Itoa(int(defaultPowerTimeout / time.Second))},
	{Name: "power_wait", Description: "Seconds to wait between the confirmed off and the on of a reboot", Type: "second", Default: "0"},
	{Name: "login_timeout", Description: "Seconds allowed for each attempt to reach the service and log in", Type: "second", Default: strconv.Itoa(int(defaultLoginTimeout / time.Second))},
	{Name: "request_timeout", Description: "Seconds allowed for each other HTTP request", Type: "second", Default: strconv.Itoa(int(defaultRequestTimeout / time.Second))},
}

// config is the validated form of the parameters. The password is kept as
// unresolved parameters: password_script runs at operation time, not in New.
type config struct {
	endpoint       string  // scheme://host:port
	origin         *origin // the same, against which every link is resolved
	addr           string  // host:port, for logs and errors
	username       string
	secret         agents.Params
	systemsURI     string
	plug           string
	basicAuth      bool
	insecure       bool
	powerTimeout   time.Duration
	powerWait      time.Duration
	loginTimeout   time.Duration
	requestTimeout time.Duration
	tls            *tls.Config
}

func parseConfig(p agents.Params, log *slog.Logger) (*config, error) {
	p, errs := agents.Resolve(p, params)
	cfg := &config{}
	ip := strings.TrimSpace(p["ip"])
	if ip == "" && len(errs) == 0 {
		errs = append(errs, errors.New("parameter ip: empty"))
	}
	cfg.username = p["username"]

	// The secret: canonical names, so agents.Params.Secret finds the file or
	// script forms; the value itself is only read when an operation runs.
	cfg.secret = agents.Params{}
	for _, name := range []string{"password", "password_file", "password_script"} {
		if v, ok := p[name]; ok {
			cfg.secret[name] = v
		}
	}

	plain, err := p.Bool("plain_http", false)
	errs = appendErr(errs, err)
	port, err := p.Int("ipport", 0)
	errs = appendErr(errs, err)
	if port == 0 {
		port = defaultPort
		if plain {
			port = 80
		}
	}
	if port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("parameter ipport: %d is not a TCP port", port))
	}
	scheme := "https"
	if plain {
		scheme = "http"
	}
	cfg.addr = net.JoinHostPort(strings.Trim(ip, "[]"), strconv.Itoa(port))
	cfg.endpoint = scheme + "://" + cfg.addr
	if ip != "" {
		if cfg.origin, err = newOrigin(cfg.endpoint); err != nil {
			errs = append(errs, fmt.Errorf("parameter ip: %q: %w", ip, err))
		}
	}

	if ru, ok := p["redfish_uri"]; ok && strings.TrimSuffix(ru, "/") != defaultRedfishURI {
		errs = append(errs, fmt.Errorf("parameter redfish_uri: %q: only %s is supported", ru, defaultRedfishURI))
	}
	if su, ok := p["systems_uri"]; ok && su != "" {
		if !strings.HasPrefix(su, defaultRedfishURI+"/") || strings.ContainsAny(su, " ?#") {
			errs = append(errs, fmt.Errorf("parameter systems_uri: %q: want a path like %s/Systems/ID", su, defaultRedfishURI))
		}
		cfg.systemsURI = strings.TrimSuffix(su, "/")
	}
	if plug, ok := p["plug"]; ok {
		cfg.plug = strings.TrimSuffix(strings.TrimSpace(plug), "/")
	}

	cfg.basicAuth, err = p.Bool("basic_auth", false)
	errs = appendErr(errs, err)
	cfg.insecure, err = p.Bool("ssl_insecure", false)
	errs = appendErr(errs, err)
	for _, name := range []string{"ssl", "ssl_secure"} {
		_, err = p.Bool(name, true)
		errs = appendErr(errs, err)
	}
	cfg.powerTimeout, err = p.Seconds("power_timeout", defaultPowerTimeout)
	errs = appendErr(errs, err)
	cfg.powerWait, err = p.Seconds("power_wait", 0)
	errs = appendErr(errs, err)
	cfg.loginTimeout, err = p.Seconds("login_timeout", defaultLoginTimeout)
	errs = appendErr(errs, err)
	cfg.requestTimeout, err = p.Seconds("request_timeout", defaultRequestTimeout)
	errs = appendErr(errs, err)
	for name, d := range map[string]time.Duration{"power_timeout": cfg.powerTimeout, "login_timeout": cfg.loginTimeout, "request_timeout": cfg.requestTimeout} {
		if d <= 0 && p[name] != "" {
			errs = append(errs, fmt.Errorf("parameter %s: must be > 0", name))
		}
	}

	cfg.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	caFile := p.String("ca_file", "")
	switch {
	case plain && (caFile != "" || cfg.insecure):
		errs = append(errs, errors.New("parameter plain_http: cannot be combined with ca_file or ssl_insecure"))
	case caFile != "" && cfg.insecure:
		errs = append(errs, errors.New("parameter ca_file: cannot be combined with ssl_insecure (which skips verification)"))
	case caFile != "":
		pem, err := os.ReadFile(caFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("parameter ca_file: %w", err))
			break
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			errs = append(errs, fmt.Errorf("parameter ca_file: %s: no PEM certificate found", caFile))
		}
		cfg.tls.RootCAs = pool
	case cfg.insecure:
		cfg.tls.InsecureSkipVerify = true
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.insecure {
		log.Warn("TLS certificate verification is disabled (ssl_insecure): the BMC's identity is not checked", "addr", cfg.addr)
	}
	return cfg, nil
}

func appendErr(errs []error, err error) []error {
	if err != nil {
		return append(errs, err)
	}
	return errs
}

// password resolves the secret at operation time.
func (c *config) password(ctx context.Context) (string, error) {
	return c.secret.Secret(ctx, "password")
}

// httpClient builds the agent's HTTP client: no proxy (a BMC is reached
// directly), bounded dials and handshakes, a small keep-alive pool, and a
// transport that sends nothing to any host but the BMC.
func (c *config) httpClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: c.loginTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     c.tls,
		TLSHandshakeTimeout: c.loginTimeout,
		// Each request's context bounds it (requestTimeout, which grows
		// with the BMC's latency); this only caps a forgotten one.
		ResponseHeaderTimeout: max(c.requestTimeout, maxRequestTimeout),
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
	}
	return &http.Client{
		Transport: &guard{o: c.origin, next: tr},
		// A BMC has no business redirecting us elsewhere with our token.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
