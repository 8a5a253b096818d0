package redfish

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Kinds of link the BMC hands the agent, as errors name them.
const (
	linkSystems    = "service root Systems link"
	linkSessions   = "service root Links.Sessions link"
	linkSession    = "session Location"
	linkMember     = "Systems collection member"
	linkReset      = "#ComputerSystem.Reset target"
	linkActionInfo = "#ComputerSystem.Reset @Redfish.ActionInfo"
	linkTask       = "task monitor Location"
)

// origin is the BMC's base URL: scheme, host and port. Every link the BMC
// hands us is resolved against it and followed only if it names the BMC
// itself. gofish joins what it is given onto the base URL as text, so a
// link such as "@other:443/redfish/v1/Systems/1" would otherwise move the
// request — with our session token, Basic credentials or password, and the
// reset — to another host, and the read-back with it.
type origin struct {
	base       *url.URL // scheme://host:port/
	host, port string   // host without brackets, lower case; port always set
}

func newOrigin(endpoint string) (*origin, error) {
	u, err := url.Parse(endpoint + "/")
	if err != nil {
		return nil, fmt.Errorf("base URL %q: %w", endpoint, err)
	}
	host, port := hostPort(u)
	if u.Host == "" || host == "" || port == "" || u.User != nil || u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("base URL %q: not a host name or address with a port", endpoint)
	}
	return &origin{base: u, host: host, port: port}, nil
}

// hostPort returns u's host (lower case, no brackets) and port (the
// scheme's default when u names none).
func hostPort(u *url.URL) (string, string) {
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return strings.ToLower(u.Hostname()), port
}

// foreign says why u is not a URL on the BMC, or "" when it is.
func (o *origin) foreign(u *url.URL) string {
	switch host, port := hostPort(u); {
	case u.Opaque != "":
		return "not a hierarchical URL"
	case host != o.host || port != o.port:
		return fmt.Sprintf("it names host %s, not the BMC %s", net.JoinHostPort(host, port), o.base.Host)
	case !strings.EqualFold(u.Scheme, o.base.Scheme):
		return fmt.Sprintf("scheme %q, not the BMC's %s", u.Scheme, o.base.Scheme)
	case u.User != nil:
		return "it carries user information"
	}
	return ""
}

// linkError is a link the agent refused to follow. It is a failure, never
// a transient error: nothing was sent because of it.
type linkError struct {
	Kind string // what the link was, e.g. linkMember
	Link string // as the BMC gave it
	Why  string
}

func (e *linkError) Error() string {
	return fmt.Sprintf("refusing the BMC's %s %s: %s", e.Kind, quoteLink(e.Link), e.Why)
}

// quoteLink quotes a link from the BMC for an error message, escaping
// control characters and cutting it short.
func quoteLink(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%q...", s[:200])
	}
	return fmt.Sprintf("%q", s)
}

// resolve returns the path (and query) on the BMC that link names: link
// is resolved against from, the path of the document or request it came
// with (RFC 3986; Redfish links are normally absolute paths, and an
// absolute URL is accepted only when it names the BMC itself).
func (o *origin) resolve(kind, link, from string) (string, error) {
	refuse := func(why string) (string, error) {
		return "", &linkError{Kind: kind, Link: link, Why: why}
	}
	if link == "" {
		return refuse("empty")
	}
	ref, err := url.Parse(link)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return refuse("not a URL reference: " + err.Error())
	}
	base := o.base
	if from != "" {
		fu, err := url.Parse(from)
		if err != nil || fu.IsAbs() || fu.Host != "" {
			return refuse(fmt.Sprintf("resolving against %q: not a path", from))
		}
		base = o.base.ResolveReference(fu)
	}
	u := base.ResolveReference(ref)
	if why := o.foreign(u); why != "" {
		return refuse(why)
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	return p, nil
}

// refusedError is a request the agent's HTTP client would not send.
type refusedError struct {
	Method, URL, Why string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("refusing to send %s %s: %s", e.Method, e.URL, e.Why)
}

// guard is the second, independent wall: the agent's HTTP transport sends
// nothing that is not for the BMC, whoever built the request (our code or
// gofish's: the service root, sessions), so no link handling elsewhere can
// leak credentials to another host.
type guard struct {
	o    *origin
	next http.RoundTripper
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if why := g.o.foreign(req.URL); why != "" {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &refusedError{Method: req.Method, URL: req.URL.Redacted(), Why: why}
	}
	return g.next.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport underneath.
func (g *guard) CloseIdleConnections() {
	if c, ok := g.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// refused reports errors of a link or request the agent would not follow:
// failures, not worth a retry, and certainly not delivered.
func refused(err error) bool {
	var le *linkError
	var re *refusedError
	return errors.As(err, &le) || errors.As(err, &re)
}
