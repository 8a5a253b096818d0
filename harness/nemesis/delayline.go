package nemesis

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// delayLine is a slow link without netem: it detaches a node's switch port
// from the bridge and carries every Ethernet frame between that port and a
// spare port of the bridge itself, through user space, each frame held for
// the link's delay. Frames keep their order. The offloads of every link are
// turned off at setup (see disableOffloads), so the frames read here are
// real, checksummed, MTU-sized frames.
type delayLine struct {
	ns      string // the switch namespace
	port    string // the node's veth end in the switch
	spare   string // spare veth end, not on the bridge; its peer is
	delay   atomic.Int64
	mu      sync.Mutex
	running bool
	a, b    *os.File
	wg      sync.WaitGroup
}

// spareNames returns the two ends of node i's spare link.
func spareNames(prefix string, i int) (free, bridged string) {
	return fmt.Sprintf("d%sa%d", prefix, i), fmt.Sprintf("d%sb%d", prefix, i)
}

// openPacket opens a raw packet socket bound to ifname in namespace ns,
// non-blocking so Go's poller owns it (Close interrupts a Read).
func openPacket(ns, ifname string) (*os.File, error) {
	var f *os.File
	err := inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind %s: %w", ifname, err)
		}
		// Only what arrives on the interface: our own writes are not
		// read back.
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			unix.Close(fd)
			return fmt.Errorf("PACKET_IGNORE_OUTGOING: %w", err)
		}
		f = os.NewFile(uintptr(fd), "packet:"+ifname)
		return nil
	})
	return f, err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// start detaches the port from the bridge and carries its frames with
// delay d; calling it again only changes the delay.
func (l *delayLine) start(d time.Duration) error {
	l.delay.Store(int64(d))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return nil
	}
	a, err := openPacket(l.ns, l.port)
	if err != nil {
		return err
	}
	b, err := openPacket(l.ns, l.spare)
	if err != nil {
		a.Close()
		return err
	}
	if err := run("ip", "-n", l.ns, "link", "set", l.port, "nomaster"); err != nil {
		a.Close()
		b.Close()
		return err
	}
	l.a, l.b, l.running = a, b, true
	l.wg.Add(2)
	go l.carry(a, b)
	go l.carry(b, a)
	return nil
}

// stop puts the port back on the bridge and ends the carrying.
func (l *delayLine) stop() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.running {
		return nil
	}
	err := run("ip", "-n", l.ns, "link", "set", l.port, "master", "br0")
	l.a.Close()
	l.b.Close()
	l.wg.Wait()
	l.running = false
	return err
}

func (l *delayLine) carry(from, to *os.File) {
	defer l.wg.Done()
	type frame struct {
		at time.Time
		b  []byte
	}
	q := make(chan frame, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range q {
			sleepUntil(f.at.Add(time.Duration(l.delay.Load())))
			to.Write(f.b)
		}
	}()
	for {
		buf := make([]byte, 9216)
		n, err := from.Read(buf)
		if err != nil {
			break
		}
		select {
		case q <- frame{time.Now(), buf[:n]}:
		default: // queue full: the link drops, as a congested one does
		}
	}
	close(q)
	<-done
}

// disableOffloads turns off checksum and segmentation offloads on ifname in
// namespace ns ("" = the switch's own interfaces use this too), so frames
// crossing a delay line are complete.
func disableOffloads(ns, ifname string) error {
	return run("ip", "netns", "exec", ns, "ethtool", "-K", ifname, "tx", "off", "tso", "off", "gso", "off", "gro", "off")
}
