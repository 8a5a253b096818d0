package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

// nodeStatus is the part of `GET /v1/status` (what `fencectl status -o
// json` prints) the harness reads.
type nodeStatus struct {
	Primary struct {
		Node    string `json:"node"`
		Epoch   uint64 `json:"epoch"`
		State   string `json:"state"`
		Blocked bool   `json:"blocked"`
		Reason  string `json:"reason"`
	} `json:"primary"`
	Self struct {
		Role    string `json:"role"`
		Acting  bool   `json:"acting"`
		Epoch   uint64 `json:"epoch"`
		Known   uint64 `json:"knownEpoch"`
		Storage string `json:"storage"`
	} `json:"self"`
	Quorum struct {
		Have   bool   `json:"have"`
		Leader string `json:"leader"`
	} `json:"quorum"`
}

// Segment is a stretch of time in which a node looked the same.
type Segment struct {
	Node  string    `json:"node"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	State string    `json:"state"` // off, paused, down (no answer), secondary, primary-elect, primary, demoting, stopping, blocked
	Epoch uint64    `json:"epoch,omitempty"`
	Info  string    `json:"info,omitempty"`
}

// observer polls every node's API and keeps each node's latest status and
// its history as segments.
type observer struct {
	c      *cluster
	mu     sync.Mutex
	latest map[string]*sample
	segs   map[string][]Segment
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// blocked records every BLOCKED takeover seen, by time.
	blocked []time.Time
}

type sample struct {
	at  time.Time
	ok  bool
	st  nodeStatus
	seg Segment
}

func newObserver(c *cluster) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{c: c, latest: map[string]*sample{}, segs: map[string][]Segment{}, cancel: cancel}
	for _, n := range c.nodes {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			o.poll(ctx, n)
		}()
	}
	return o
}

func (o *observer) stop() {
	o.cancel()
	o.wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	for name, s := range o.segs {
		if len(s) > 0 {
			s[len(s)-1].To = now
			o.segs[name] = s
		}
	}
}

func unixClient(socket string) *http.Client {
	return &http.Client{Timeout: 400 * time.Millisecond, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
}

func getStatus(ctx context.Context, client *http.Client) (nodeStatus, error) {
	var st nodeStatus
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://fenced/v1/status", nil)
	resp, err := client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != 200 {
		return st, fmt.Errorf("status %s", resp.Status)
	}
	return st, json.Unmarshal(b, &st)
}

func (o *observer) poll(ctx context.Context, n *node) {
	client := unixClient(n.dn.Socket)
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for {
		s := &sample{at: time.Now()}
		switch {
		case !n.on():
			s.seg.State = "off"
		case n.isPaused():
			s.seg.State = "paused"
		default:
			st, err := getStatus(ctx, client)
			if err != nil {
				if _, e := os.Stat(n.dn.Socket); e != nil || n.procs().daemonPid(n.cl.opts.Fenced) == 0 {
					s.seg.State = "no daemon"
				} else {
					s.seg.State = "no answer"
				}
				break
			}
			s.ok, s.st = true, st
			s.seg.State = st.Self.Role
			if st.Self.Acting {
				s.seg.State = "primary"
			}
			s.seg.Epoch = st.Self.Epoch
			if st.Primary.Node == n.name && st.Primary.Blocked {
				s.seg.State = "blocked"
				s.seg.Info = st.Primary.Reason
			}
		}
		o.record(n.name, s)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (o *observer) record(name string, s *sample) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.latest[name] = s
	if s.seg.State == "blocked" {
		o.blocked = append(o.blocked, s.at)
	}
	segs := o.segs[name]
	if k := len(segs); k > 0 && segs[k-1].State == s.seg.State && segs[k-1].Epoch == s.seg.Epoch {
		segs[k-1].To = s.at
		return
	}
	if k := len(segs); k > 0 {
		segs[k-1].To = s.at
	}
	seg := s.seg
	seg.Node, seg.From, seg.To = name, s.at, s.at
	o.segs[name] = append(segs, seg)
}

// snapshot returns the latest sample of every node.
func (o *observer) snapshot() map[string]sample {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]sample{}
	for k, v := range o.latest {
		out[k] = *v
	}
	return out
}

func (o *observer) blockedBetween(from, to time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.blocked {
		if !t.Before(from) && !t.After(to) {
			return true
		}
	}
	return false
}

func (o *observer) segments() []Segment {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Segment
	for _, n := range o.c.nodes {
		out = append(out, o.segs[n.name]...)
	}
	return out
}

// primary returns the one node acting as primary in the latest samples, if
// exactly one does.
func (o *observer) primary() (*node, uint64) {
	var found *node
	var epoch uint64
	for name, s := range o.snapshot() {
		if s.ok && s.st.Self.Acting {
			if found != nil {
				return nil, 0
			}
			found, epoch = o.c.byName(name), s.st.Self.Epoch
		}
	}
	return found, epoch
}

// blindTail follows the epoch-blind log as it grows.
type blindTail struct {
	path   string
	mu     sync.Mutex
	recs   []Record
	cancel context.CancelFunc
	done   chan struct{}
}

func newBlindTail(path string) *blindTail {
	ctx, cancel := context.WithCancel(context.Background())
	t := &blindTail{path: path, cancel: cancel, done: make(chan struct{})}
	go t.follow(ctx)
	return t
}

func (t *blindTail) stop() { t.cancel(); <-t.done }

func (t *blindTail) follow(ctx context.Context) {
	defer close(t.done)
	var off int64
	var partial []byte
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		if f, err := os.Open(t.path); err == nil {
			f.Seek(off, io.SeekStart)
			b, _ := io.ReadAll(f)
			f.Close()
			off += int64(len(b))
			b = append(partial, b...)
			cut := len(b)
			for cut > 0 && b[cut-1] != '\n' {
				cut--
			}
			partial = append([]byte(nil), b[cut:]...)
			if recs, _ := ParseRecords(b[:cut]); len(recs) > 0 {
				t.mu.Lock()
				t.recs = append(t.recs, recs...)
				t.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// last returns the latest record, if any.
func (t *blindTail) last() (Record, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recs) == 0 {
		return Record{}, false
	}
	return t.recs[len(t.recs)-1], true
}

// firstAfter returns the first record after since that satisfies ok.
func (t *blindTail) firstAfter(since time.Time, ok func(Record) bool) (Record, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// The log is in write order; record times are taken just before each
	// write, so they are ordered within a second of slack.
	i := sort.Search(len(t.recs), func(i int) bool { return t.recs[i].Time.After(since.Add(-time.Second)) })
	for _, r := range t.recs[i:] {
		if r.Time.After(since) && ok(r) {
			return r, true
		}
	}
	return Record{}, false
}

// wroteSince reports whether node wrote under epoch after since.
func (t *blindTail) wroteSince(node string, epoch uint64, since time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.recs) - 1; i >= 0 && t.recs[i].Time.After(since); i-- {
		if t.recs[i].Node == node && t.recs[i].Epoch == epoch {
			return true
		}
	}
	return false
}

// gap is the longest stretch in [from, to] without a write.
func (t *blindTail) gap(from, to time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.recs), func(i int) bool { return !t.recs[i].Time.Before(from) })
	prev := from
	var g time.Duration
	for ; i < len(t.recs) && !t.recs[i].Time.After(to); i++ {
		g = max(g, t.recs[i].Time.Sub(prev))
		prev = t.recs[i].Time
	}
	return max(g, to.Sub(prev))
}

// actingBetween returns a node other than except that reported acting as
// primary (or starting the storage) between from and to, if any.
func (o *observer) actingBetween(from, to time.Time, except string) (Segment, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name, segs := range o.segs {
		if name == except {
			continue
		}
		for _, s := range segs {
			if s.State == "primary" && !s.To.Before(from) && !s.From.After(to) {
				return s, true
			}
		}
	}
	return Segment{}, false
}
