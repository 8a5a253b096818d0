package quorum

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pipeConn is one end of a pipe that records being closed.
type pipeConn struct {
	net.Conn
	closed atomic.Bool
}

func (p *pipeConn) Close() error { p.closed.Store(true); return p.Conn.Close() }

func TestHedgedDialTakesTheFirstToComplete(t *testing.T) {
	var mu sync.Mutex
	var conns []*pipeConn
	attempts := 0
	dial := func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		attempts++
		n := attempts
		mu.Unlock()
		if n == 1 { // its SYN was lost: it completes only after the winner
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
		}
		a, _ := net.Pipe()
		c := &pipeConn{Conn: a}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c, nil
	}
	start := time.Now()
	c, err := hedgedDial(2*time.Second, 20*time.Millisecond, 3, dial)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 300*time.Millisecond {
		t.Fatalf("waited %v for the stalled first attempt", took)
	}
	defer c.Close()
	time.Sleep(400 * time.Millisecond) // the first attempt completes, late
	mu.Lock()
	defer mu.Unlock()
	if attempts != 2 {
		t.Fatalf("%d attempts, want 2 (no third after the second won)", attempts)
	}
	if len(conns) != 2 {
		t.Fatalf("%d connections made, want 2: the loser's handshake was cut off", len(conns))
	}
	for _, o := range conns {
		if o != c && !o.closed.Load() {
			t.Fatal("a losing attempt's connection was left open")
		}
	}
	if c.(*pipeConn).closed.Load() {
		t.Fatal("the winner was closed")
	}
}

func TestHedgedDialOneAttemptWhenItIsQuick(t *testing.T) {
	var attempts atomic.Int32
	c, err := hedgedDial(time.Second, 50*time.Millisecond, 3, func(context.Context) (net.Conn, error) {
		attempts.Add(1)
		a, _ := net.Pipe()
		return a, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	time.Sleep(120 * time.Millisecond)
	if n := attempts.Load(); n != 1 {
		t.Fatalf("%d attempts for a dial that completed at once", n)
	}
}

func TestHedgedDialFailsWhenEveryAttemptFails(t *testing.T) {
	var attempts atomic.Int32
	start := time.Now()
	_, err := hedgedDial(150*time.Millisecond, 20*time.Millisecond, 3, func(ctx context.Context) (net.Conn, error) {
		attempts.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	if n := attempts.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3 (the most)", n)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %v past a 150ms timeout", took)
	}
}

func TestHedgedDialRefusedAtOnceIsNotRetried(t *testing.T) {
	var attempts atomic.Int32
	_, err := hedgedDial(time.Second, 50*time.Millisecond, 3, func(context.Context) (net.Conn, error) {
		attempts.Add(1)
		return nil, errors.New("connection refused")
	})
	if err == nil {
		t.Fatal("no error")
	}
	time.Sleep(120 * time.Millisecond)
	if n := attempts.Load(); n != 1 {
		t.Fatalf("%d attempts after a refusal", n)
	}
}
