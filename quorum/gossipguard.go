package quorum

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// What an outsider without the key may make the gossip port hold.
// memberlist reads a whole encrypted stream message into memory before it
// can tell whether it decrypts (up to 20 MiB, growing a buffer to twice
// that), on a goroutine of its own per connection, without a cap on
// connections; it has no setting for either. gossipGuard wraps its
// transport and applies these limits before memberlist sees a connection.
const (
	// maxGossipFrame is the largest encrypted stream message accepted,
	// and sent (Call refuses a larger request or reply with a clear
	// error instead of having it dropped by the receiver). The largest
	// legitimate ones are forwarded admin replies: a fence record with
	// every attempt and its stderr (at most 4 KiB each, see stonith) fits
	// a thousand attempts; push/pull state is a few hundred bytes a node.
	maxGossipFrame = 4 << 20
	// maxRPCMessage leaves room for memberlist's framing and the
	// encryption (under 64 bytes) within maxGossipFrame.
	maxRPCMessage = maxGossipFrame - 1<<10
	// minGossipFrame is the shortest ciphertext memberlist can decrypt:
	// version byte, nonce and tag.
	minGossipFrame = 1 + 12 + 16
	// gossipHeaderTimeout bounds the wait for a stream's first five
	// bytes; a key holder sends them with its first write.
	gossipHeaderTimeout = 5 * time.Second
	// gossipStrangerFactor is how many bytes of memory memberlist may
	// hold per byte an unauthenticated stream sent: its buffer grows by
	// doubling, and decryption allocates the plaintext before the tag
	// is checked.
	gossipStrangerFactor = 3
)

// memberlist's stream framing (net.go): an optional label header (type
// 244, length byte, label) that fenced never sends, then with encryption
// the message type encryptMsg (10), a big-endian uint32 length, and that
// many bytes of ciphertext.
const (
	gossipEncryptMsg = 10
	gossipLabelMsg   = 244
)

// MaxMessage is the largest request or reply Call carries, its JSON
// envelope included (a larger one is refused with an error saying so).
const MaxMessage = maxRPCMessage

var (
	// gossipAdmit caps the gossip streams from outside the cluster's
	// addresses (see admitLimits). memberlist closes a stream when it has
	// handled its one message (within its TCP timeout, 10 s), so a
	// configured node has few open at a time: push/pull every 30 s, TCP
	// fallback probes, forwarded requests and replies.
	gossipAdmit = admitLimits{PerSource: 4, Total: 32, PerKnown: 64}
	// gossipStrangerBytes bounds what the strangers' streams together may
	// make memberlist buffer before they prove the key (counted with
	// gossipStrangerFactor).
	gossipStrangerBytes int64 = 12 << 20
)

// errGossipBudget ends a stranger's stream when the strangers together
// have sent more than gossipStrangerBytes allows.
var errGossipBudget = errors.New(gossipBudgetText)

// gossipBudgetText is errGossipBudget's text, which memberlist logs when
// it ends such a stream (logWriter keeps that line at DEBUG: the guard
// has logged the refusal).
const gossipBudgetText = "unauthenticated gossip streams over their memory budget"

// gossipGuard is a memberlist.Transport around the real one that screens
// what outsiders can send before memberlist buffers it:
//   - streams: per-source and total caps (admission); with encryption, the
//     header must announce an encrypted message of a sane length, within
//     gossipHeaderTimeout; a stranger's bytes count against a shared budget;
//   - packets: with encryption, anything that cannot be an encrypted
//     memberlist packet is dropped before it is decrypted (memberlist logs
//     an ERROR per packet it cannot decrypt; see logWriter).
//
// What is refused is logged through refusals.
type gossipGuard struct {
	inner     memberlist.NodeAwareTransport
	encrypted bool
	admit     *admission
	budget    *byteBudget // shared by the strangers' streams
	refused   *refusals

	beacon  atomic.Pointer[func([]byte, net.Addr)] // takes beacon frames (see beacon.go)
	streams chan net.Conn
	packets chan *memberlist.Packet
	closing chan struct{} // Shutdown began: drain the inner transport, pass nothing on
	stop    chan struct{} // the inner transport stopped: the loops end
	once    sync.Once
	wg      sync.WaitGroup

	mu      sync.Mutex
	shut    bool                  // Shutdown began
	pending map[net.Conn]struct{} // reading their header; closed at Shutdown
}

func newGossipGuard(inner memberlist.Transport, encrypted bool, known map[netip.Addr]bool, refused *refusals) *gossipGuard {
	na, ok := inner.(memberlist.NodeAwareTransport)
	if !ok {
		na = nodeAware{inner}
	}
	g := &gossipGuard{inner: na, encrypted: encrypted, admit: newAdmission(gossipAdmit, known),
		budget: newByteBudget(gossipStrangerBytes), refused: refused,
		streams: make(chan net.Conn), packets: make(chan *memberlist.Packet),
		closing: make(chan struct{}), stop: make(chan struct{}), pending: map[net.Conn]struct{}{}}
	g.wg.Add(2)
	go g.streamLoop()
	go g.packetLoop()
	return g
}

func (g *gossipGuard) streamLoop() {
	defer g.wg.Done()
	for {
		select {
		case <-g.stop:
			return
		case c := <-g.inner.StreamCh():
			release, reason := g.admit.admit(c.RemoteAddr())
			if reason != "" {
				c.Close()
				g.refused.note("gossip", reason, c.RemoteAddr().String(), "")
				continue
			}
			g.mu.Lock()
			if g.shut {
				g.mu.Unlock()
				release()
				c.Close()
				continue
			}
			g.pending[c] = struct{}{}
			g.wg.Add(1)
			g.mu.Unlock()
			go g.screen(c, release)
		}
	}
}

// screen reads and checks a stream's header, then hands the stream to
// memberlist.
func (g *gossipGuard) screen(c net.Conn, release func()) {
	defer g.wg.Done()
	sc := &screenedConn{Conn: c, release: release, left: -1}
	var err error
	if g.encrypted {
		c.SetDeadline(time.Now().Add(gossipHeaderTimeout))
		var n uint32
		sc.head, n, err = readGossipHeader(c)
		if err == nil {
			err = c.SetDeadline(time.Time{})
		}
		sc.left = int64(n)
		if !g.admit.isKnown(c.RemoteAddr()) {
			sc.budget, sc.refused = g.budget, g.refused
		}
	}
	g.mu.Lock()
	delete(g.pending, c)
	g.mu.Unlock()
	if err != nil {
		sc.Close()
		select {
		case <-g.closing:
			return
		default:
		}
		reason, detail := "bad gossip stream header", err.Error()
		var he *headerError
		if errors.As(err, &he) {
			reason, detail = he.reason, he.detail
		} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			reason, detail = "no gossip message within "+gossipHeaderTimeout.String(), ""
		} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			reason, detail = "closed before a whole gossip header", ""
		}
		g.refused.note("gossip", reason, c.RemoteAddr().String(), detail)
		return
	}
	select {
	case g.streams <- sc:
	case <-g.closing:
		sc.Close()
	}
}

// headerError is a stream header refused for what it says.
type headerError struct{ reason, detail string }

func (e *headerError) Error() string {
	if e.detail == "" {
		return e.reason
	}
	return e.reason + ": " + e.detail
}

// readGossipHeader reads the first five bytes of an encrypted memberlist
// stream: encryptMsg and the ciphertext's length, which must be within
// [minGossipFrame, maxGossipFrame]. It returns the bytes read (to be
// replayed to memberlist) and the length.
func readGossipHeader(r io.Reader) ([]byte, uint32, error) {
	head := make([]byte, 5)
	if _, err := io.ReadFull(r, head[:1]); err != nil {
		return nil, 0, err
	}
	if err := checkGossipType(head[0]); err != nil {
		return nil, 0, err
	}
	if _, err := io.ReadFull(r, head[1:]); err != nil {
		return nil, 0, err
	}
	n, err := checkGossipLength(head[1:])
	return head, n, err
}

func checkGossipType(b byte) error {
	switch b {
	case gossipEncryptMsg:
		return nil
	case gossipLabelMsg:
		return &headerError{"labelled gossip stream (fenced sends no labels)", ""}
	}
	return &headerError{"not an encrypted gossip message", "type " + strconv.Itoa(int(b))}
}

func checkGossipLength(b []byte) (uint32, error) {
	n := binary.BigEndian.Uint32(b)
	if n < minGossipFrame || n > maxGossipFrame {
		return 0, &headerError{"gossip message length out of bounds",
			fmt.Sprintf("%d bytes, want %d to %d", n, minGossipFrame, maxGossipFrame)}
	}
	return n, nil
}

// screenedConn is a stream memberlist reads after its header was checked:
// the header is replayed, then at most left bytes (the announced
// ciphertext; -1: no limit, without encryption). A stranger's bytes are
// taken from the shared budget as they arrive; everything is given back at
// Close, which also frees the admission place.
type screenedConn struct {
	net.Conn
	head    []byte
	left    int64
	budget  *byteBudget
	refused *refusals // notes a refusal for the budget
	taken   int64
	release func()

	once sync.Once
}

func (c *screenedConn) Read(b []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(b, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	if c.left == 0 {
		return 0, io.EOF
	}
	if c.left > 0 && int64(len(b)) > c.left {
		b = b[:c.left]
	}
	if c.budget != nil {
		want := int64(len(b)) * gossipStrangerFactor
		if !c.budget.take(want) {
			c.refused.note("gossip", gossipBudgetText, c.RemoteAddr().String(), "")
			return 0, errGossipBudget
		}
		c.taken += want
		n, err := c.Conn.Read(b)
		unused := int64(len(b)-n) * gossipStrangerFactor
		c.budget.give(unused)
		c.taken -= unused
		c.left -= int64(n)
		return n, err
	}
	n, err := c.Conn.Read(b)
	if c.left > 0 {
		c.left -= int64(n)
	}
	return n, err
}

func (c *screenedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.budget != nil {
			c.budget.give(c.taken)
		}
		c.release()
	})
	return err
}

// setBeaconHandler routes beacon frames to h instead of memberlist.
func (g *gossipGuard) setBeaconHandler(h func(frame []byte, from net.Addr)) { g.beacon.Store(&h) }

func (g *gossipGuard) packetLoop() {
	defer g.wg.Done()
	for {
		select {
		case <-g.stop:
			return
		case p := <-g.inner.PacketCh():
			select {
			case <-g.closing:
				continue
			default:
			}
			if len(p.Buf) > 0 && p.Buf[0] == beaconFrame {
				if h := g.beacon.Load(); h != nil {
					(*h)(p.Buf, p.From)
				}
				continue
			}
			if g.encrypted {
				if err := checkGossipPacket(p.Buf); err != nil {
					g.refused.note("gossip-udp", err.reason, addrString(p.From), err.detail)
					continue
				}
			}
			// A right-sized copy: the transport reads every packet into
			// a fresh 64 KiB buffer, which memberlist would otherwise
			// keep while the message waits in its queue.
			p.Buf = append([]byte(nil), p.Buf...)
			select {
			case g.packets <- p:
			case <-g.closing:
			}
		}
	}
}

// checkGossipPacket refuses what cannot be an encrypted memberlist packet:
// a label header (fenced sends none), an unknown encryption version, or
// fewer bytes than version, nonce and tag.
func checkGossipPacket(b []byte) *headerError {
	switch {
	case len(b) > 0 && b[0] == gossipLabelMsg:
		return &headerError{"labelled gossip packet (fenced sends no labels)", ""}
	case len(b) < minGossipFrame:
		return &headerError{"gossip packet too short to be encrypted", strconv.Itoa(len(b)) + " bytes"}
	case b[0] > 1:
		return &headerError{"not an encrypted gossip packet", "version " + strconv.Itoa(int(b[0]))}
	}
	return nil
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// StreamCh implements memberlist.Transport: the screened streams.
func (g *gossipGuard) StreamCh() <-chan net.Conn { return g.streams }

// PacketCh implements memberlist.Transport: the screened packets.
func (g *gossipGuard) PacketCh() <-chan *memberlist.Packet { return g.packets }

func (g *gossipGuard) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return g.inner.FinalAdvertiseAddr(ip, port)
}

func (g *gossipGuard) WriteTo(b []byte, addr string) (time.Time, error) {
	return g.inner.WriteTo(b, addr)
}

func (g *gossipGuard) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	return g.inner.WriteToAddress(b, addr)
}

func (g *gossipGuard) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return g.inner.DialTimeout(addr, timeout)
}

func (g *gossipGuard) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return g.inner.DialAddressTimeout(addr, timeout)
}

// Shutdown stops the inner transport (draining its channels meanwhile, so
// its listeners never block on a send), aborts the header reads in
// progress and waits for every goroutine of the guard.
func (g *gossipGuard) Shutdown() error {
	var err error
	g.once.Do(func() {
		close(g.closing)
		g.mu.Lock()
		g.shut = true
		for c := range g.pending {
			c.Close()
		}
		g.mu.Unlock()
		err = g.inner.Shutdown()
		close(g.stop)
		g.wg.Wait()
		g.refused.close()
	})
	return err
}

// nodeAware adapts a transport without the node-aware methods.
type nodeAware struct{ memberlist.Transport }

func (t nodeAware) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

func (t nodeAware) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

var _ memberlist.NodeAwareTransport = (*gossipGuard)(nil)

// guardTransport returns the guarded transport of a node: around
// o.Transport when set (in-process tests), else around memberlist's own
// UDP/TCP transport bound to host:port, which logs to out.
func guardTransport(o MembershipOptions, host string, port int, out io.Writer, refused *refusals) (*gossipGuard, error) {
	inner := o.Transport
	if inner == nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{host}, BindPort: port, Logger: log.New(out, "", log.LstdFlags),
		})
		if err != nil {
			return nil, err
		}
		inner = nt
	}
	known := knownAddrs(o.Peers, func(p Peer) string { return p.Gossip })
	return newGossipGuard(inner, len(o.keys()) > 0, known, refused), nil
}
