package nemesis

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenced/fenced/daemon/storage/tokenstore"
)

// Record is one write of the primary's application: appended to a file on
// the shared filesystem and to the epoch-blind log outside it.
type Record struct {
	Time  time.Time `json:"t"`
	Node  string    `json:"node"`
	Epoch uint64    `json:"epoch"`
	Seq   uint64    `json:"seq"`
	Pid   int       `json:"pid"`
}

// WriterConfig is `nemesis writer`.
type WriterConfig struct {
	Node     string
	Epoch    uint64
	File     string // on the shared filesystem
	Blind    string // the outside log that checks nothing
	Interval time.Duration
	// Store, in the tokens profile, is the token-checking store: each
	// record is written there first, and to File and Blind only once the
	// store accepted it; the writer ends when the store calls its epoch
	// stale. An application on storage that checks tokens.
	Store string
}

// RunWriter appends a record to File then to Blind every Interval until ctx
// ends. It checks no epoch: it is the application a fencing daemon must
// stop in time (unless Store is set: see WriterConfig).
func RunWriter(ctx context.Context, c WriterConfig) error {
	if c.Node == "" || c.Epoch == 0 || c.File == "" || c.Blind == "" {
		return errors.New("writer: node, a non-zero epoch, file and blind log are required")
	}
	if c.Interval <= 0 {
		c.Interval = 20 * time.Millisecond
	}
	disk, err := os.OpenFile(c.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	defer disk.Close()
	blind, err := os.OpenFile(c.Blind, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	defer blind.Close()
	tick := time.NewTicker(c.Interval)
	defer tick.Stop()
	pid := os.Getpid()
	var tokens *tokenstore.Writer
	if c.Store != "" {
		tokens = &tokenstore.Writer{URL: c.Store, Node: c.Node, Epoch: c.Epoch}
	}
	for seq := uint64(1); ; seq++ {
		if tokens != nil {
			err := tokens.WriteOnce(ctx, seq)
			switch {
			case errors.Is(err, tokenstore.ErrStale):
				return fmt.Errorf("writer %s epoch %d: %w", c.Node, c.Epoch, err)
			case err != nil:
				seq-- // not written: the store decides, not the network
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				continue
			}
		}
		b, _ := json.Marshal(Record{Time: time.Now().UTC(), Node: c.Node, Epoch: c.Epoch, Seq: seq, Pid: pid})
		b = append(b, '\n')
		// One write(2) each: O_APPEND makes it atomic against the other
		// writers of the same file.
		if _, err := disk.Write(b); err != nil {
			return fmt.Errorf("writer %s epoch %d: shared file: %w", c.Node, c.Epoch, err)
		}
		if _, err := blind.Write(b); err != nil {
			return fmt.Errorf("writer %s epoch %d: blind log: %w", c.Node, c.Epoch, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// ParseRecords parses JSON-lines records; a line that does not parse (a torn
// or garbled write) is reported with its number, and parsing goes on.
func ParseRecords(b []byte) (recs []Record, bad []string) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil || r.Node == "" || r.Epoch == 0 {
			bad = append(bad, fmt.Sprintf("line %d: %q", n, truncate(string(line), 80)))
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// EscapeRequest asks the harness to start a writer outside the node's
// machine: the negative control's broken storage.
type EscapeRequest struct {
	Node     string        `json:"node"`
	Epoch    uint64        `json:"epoch"`
	File     string        `json:"file"`
	Blind    string        `json:"blind"`
	Interval time.Duration `json:"interval"`
}

// RequestEscape is `nemesis escape`: what the negative control's start hook
// runs instead of starting the writer itself.
func RequestEscape(socket string, req EscapeRequest) error {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	var answer struct{ Error string }
	if err := json.NewDecoder(c).Decode(&answer); err != nil {
		return err
	}
	if answer.Error != "" {
		return errors.New(answer.Error)
	}
	return nil
}

// escapeServer starts the writers the negative control's hooks ask for, in
// the host's PID namespace but the asking node's mount namespace (so they
// write the filesystem that node mounted): a power-off of the node does
// not stop them.
type escapeServer struct {
	ln      *net.UnixListener
	self    string
	logPath string
	mu      sync.Mutex
	procs   []*exec.Cmd
	wg      sync.WaitGroup
}

func startEscapeServer(socket, self, logPath string) (*escapeServer, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, err
	}
	s := &escapeServer{ln: ln, self: self, logPath: logPath}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *escapeServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		err = s.handle(c)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		json.NewEncoder(c).Encode(struct{ Error string }{msg})
		c.Close()
	}
}

func (s *escapeServer) handle(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if credErr != nil {
		return credErr
	}
	var req EscapeRequest
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return err
	}
	logf, err := logTo(s.logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Hold the asking node's mount namespace open: the hook may be gone by
	// the time nsenter runs.
	mnt, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", cred.Pid))
	if err != nil {
		return err
	}
	defer mnt.Close()
	cmd := exec.Command("nsenter", "--mount=/proc/self/fd/3", "--",
		s.self, "writer", "--node", req.Node, "--epoch", fmt.Sprint(req.Epoch), "--file", req.File,
		"--blind", req.Blind, "--interval", req.Interval.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{mnt}
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	s.procs = append(s.procs, cmd)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); cmd.Wait() }()
	return nil
}

// Close kills every escaped writer and waits for them.
func (s *escapeServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.procs {
		if c.Process != nil {
			c.Process.Kill()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}
