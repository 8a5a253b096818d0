package daemon

import "sync"

// taskGroup owns goroutines: Go refuses new work once Stop has begun, and Stop
// waits for every goroutine it started, so nothing runs after the daemon
// says it stopped and nothing is started into a half-closed daemon.
type taskGroup struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f on its own goroutine and reports whether it did (false once
// stopping began).
func (g *taskGroup) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Stop refuses new work and waits for the running goroutines.
func (g *taskGroup) Stop() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
