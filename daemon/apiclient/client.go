// Package apiclient talks to a fenced daemon over its unix socket; fencectl,
// the demo and the cluster tests use it.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"
)

// ErrNotRunning means nothing answers on the socket.
var ErrNotRunning = errors.New("fenced is not running")

// ErrPermission means the socket is there but this user may not open it.
var ErrPermission = errors.New("permission denied")

// APIError is a non-2xx answer.
type APIError struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
	Code   string `json:"code"` // one of api's Code constants
}

func (e *APIError) Error() string { return e.Msg }

// Client is a fenced API client.
type Client struct {
	Socket string
	hc     *http.Client
}

// New returns a client for the socket at path.
func New(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns:    2,
		IdleConnTimeout: 10 * time.Second,
	}
	return &Client{Socket: path, hc: &http.Client{Transport: tr}}
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Do performs one request; body (if any) is sent as JSON and the answer
// decoded into out (if not nil).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return apiError(method, path, resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: undecodable answer: %w", method, path, err)
		}
	}
	return nil
}

// Get performs a GET whose answer is not JSON (the diagnostics bundle)
// and returns its body to be read and closed by the caller; a failure is
// an error as Do's.
func (c *Client) Get(ctx context.Context, path string, query url.Values) (io.ReadCloser, error) {
	resp, err := c.send(ctx, "GET", path, query, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, apiError("GET", path, resp, data)
	}
	return resp.Body, nil
}

// send sends one request; a socket that cannot be opened is ErrNotRunning
// or ErrPermission.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://fenced" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			if errors.Is(err, fs.ErrPermission) {
				return nil, fmt.Errorf("%w on %s: %s", ErrPermission, c.Socket, accessHint(c.Socket))
			}
			return nil, fmt.Errorf("%w (cannot connect to %s: %v)", ErrNotRunning, c.Socket, errors.Unwrap(ne.Err))
		}
		return nil, err
	}
	return resp, nil
}

// apiError is a non-2xx answer's error: the daemon's JSON error, or the
// status line.
func apiError(method, path string, resp *http.Response, data []byte) error {
	e := &APIError{Status: resp.StatusCode}
	if json.Unmarshal(data, e) != nil || e.Msg == "" {
		e.Msg = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
	}
	return e
}

// accessHint says who may open the socket at path: root, and the members of
// its group (the daemon's api.group), with the owner and mode when they
// can be read.
func accessHint(path string) string {
	hint := "fencectl needs root, or membership of the socket's group (api.group in fenced.yaml)"
	fi, err := os.Stat(path)
	if err != nil {
		return hint + " and access to its directory"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return hint
	}
	owner, group := strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	return fmt.Sprintf("%s; the socket is %s:%s, mode %v", hint, owner, group, fi.Mode().Perm())
}
