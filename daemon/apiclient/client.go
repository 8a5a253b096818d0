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
	"net"
	"net/http"
	"net/url"
	"time"
)

// ErrNotRunning means nothing answers on the socket.
var ErrNotRunning = errors.New("fenced is not running")

// APIError is a non-2xx answer.
type APIError struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
	Code   string `json:"code"`
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
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://fenced" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			return fmt.Errorf("%w (cannot connect to %s: %v)", ErrNotRunning, c.Socket, errors.Unwrap(ne.Err))
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Msg == "" {
			e.Msg = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: undecodable answer: %w", method, path, err)
		}
	}
	return nil
}
