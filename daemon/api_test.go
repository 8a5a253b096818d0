package daemon_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/apiclient"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// TestAPIHostileClients drives the local API the way a broken or hostile
// local client would, against a real 3-node cluster: a request whose body
// never arrives, hundreds of silent connections on the API socket and the
// metrics port, a refusal asked through a follower, and fence reasons with
// terminal escapes or a megabyte of text.
func TestAPIHostileClients(t *testing.T) {
	metrics := make([]string, 3)
	for i := range metrics {
		p, err := devcluster.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		metrics[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true,
		NodeConfig: func(i int, cfg *config.Config) { cfg.Metrics.Listen = metrics[i] }})
	p, _, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	follower := c.Other(p)
	victim := c.Other(p, follower)

	t.Run("body never arrives", func(t *testing.T) {
		conn, err := net.Dial("unix", follower.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/fence HTTP/1.1\r\nHost: fenced\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
		start := time.Now()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("no answer and connection still open after %v", time.Since(start).Round(time.Second))
		case err == nil:
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("answer %s, want 408", resp.Status)
			}
		}
		t.Logf("request without body ended after %v (%v)", time.Since(start).Round(100*time.Millisecond), err)
	})

	t.Run("connection cap", func(t *testing.T) {
		pid := follower.Pid()
		before := openFDs(t, pid)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 300 {
			if c, err := net.Dial("unix", follower.Socket); err == nil {
				conns = append(conns, c)
			}
		}
		for range 300 {
			if c, err := net.DialTimeout("tcp", metrics[follower.Index], time.Second); err == nil {
				conns = append(conns, c)
			}
		}
		time.Sleep(500 * time.Millisecond)
		during := openFDs(t, pid)
		t.Logf("daemon descriptors: %d before, %d with %d silent connections open", before, during, len(conns))
		if during > before+200 { // caps of 64 on each listener
			t.Errorf("the daemon holds %d descriptors with %d silent connections (was %d): connections are not capped", during, len(conns), before)
		}
	})

	cl := follower.Client()
	defer cl.Close()

	t.Run("refused through a follower", func(t *testing.T) {
		// Only the leader knows it is the primary-elect already: the
		// refusal is made there and must keep its kind on the way back.
		err := cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/transfer", nil, daemon.AdminRequest{Node: p.Name}, nil)
		var ae *apiclient.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "refused" {
			t.Errorf("transfer to the leader through a follower: %#v (%v), want 400 refused", ae, err)
		}
		direct := p.Client()
		defer direct.Close()
		err = direct.Do(ctxT(t, 10*time.Second), "POST", "/v1/transfer", nil, daemon.AdminRequest{Node: p.Name}, nil)
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "refused" {
			t.Errorf("transfer to the leader on the leader: %#v (%v), want 400 refused", ae, err)
		}
	})

	t.Run("reasons", func(t *testing.T) {
		var h daemon.History
		if err := cl.Do(ctxT(t, 10*time.Second), "GET", "/v1/history", nil, nil, &h); err != nil {
			t.Fatal(err)
		}
		n := len(h.Records)
		var ae *apiclient.APIError
		for _, tc := range []struct {
			size   int
			status int
			want   string
		}{{4 << 10, http.StatusBadRequest, "reason: 4096 bytes, at most 1024"}, {1 << 20, http.StatusRequestEntityTooLarge, "request body over"}} {
			err := cl.Do(ctxT(t, 10*time.Second), "POST", "/v1/fence", nil, daemon.AdminRequest{Node: victim.Name, Reason: strings.Repeat("x", tc.size)}, nil)
			if !errors.As(err, &ae) || ae.Status != tc.status || !strings.Contains(ae.Msg, tc.want) {
				t.Errorf("reason of %d bytes: %v, want %d %q", tc.size, err, tc.status, tc.want)
			}
		}
		if err := cl.Do(ctxT(t, 10*time.Second), "GET", "/v1/history", nil, nil, &h); err != nil {
			t.Fatal(err)
		}
		if len(h.Records) != n {
			t.Errorf("a refused fence left %d history records (was %d)", len(h.Records), n)
		}
		var rec fencing.Record
		dirty := "disk\x1b[2J\x1b]0;owned\x07 full\r\n42  2025-01-01 00:00:00  fence  node9\u202e"
		if err := cl.Do(ctxT(t, 30*time.Second), "POST", "/v1/fence", nil, daemon.AdminRequest{Node: victim.Name, Reason: dirty}, &rec); err != nil {
			t.Fatal(err)
		}
		if err := cl.Do(ctxT(t, 10*time.Second), "GET", "/v1/history", nil, nil, &h); err != nil {
			t.Fatal(err)
		}
		for _, r := range h.Records {
			for _, ch := range r.Reason {
				if ch < 0x20 || ch == 0x7f || ch == '\u202e' {
					t.Errorf("record %d keeps control character %U in its reason %q", r.ID, ch, r.Reason)
					break
				}
			}
		}
		if rec.Reason == "" || !strings.Contains(rec.Reason, "disk") || !strings.Contains(rec.Reason, "full") {
			t.Errorf("cleaned reason %q lost its text", rec.Reason)
		}
	})
}

// openFDs counts the open descriptors of process pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
