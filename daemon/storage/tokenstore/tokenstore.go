// Package tokenstore is a token-checking storage stand-in for tests and the
// demo: an HTTP service that accepts a write only when its epoch (the
// fencing token) is at least the highest epoch it has accepted, and logs
// every attempt. Check reads such a log and proves that no stale epoch was
// accepted and that no two nodes wrote under the same epoch, i.e. that no
// two storage holders overlapped. RunWriter is the matching "application":
// it writes with its epoch until the store calls it stale.
package tokenstore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Results of a write attempt.
const (
	Accepted = "accepted"
	Stale    = "stale"   // epoch below the highest accepted: 409
	Invalid  = "invalid" // malformed request: 400
)

// WriteRequest is the body of POST /write.
type WriteRequest struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
	Seq   uint64 `json:"seq"`
	Data  string `json:"data,omitempty"`
}

// WriteResponse answers a write.
type WriteResponse struct {
	Result  string `json:"result"`
	Highest uint64 `json:"highest"` // highest accepted epoch after this request
	Error   string `json:"error,omitempty"`
}

// Entry is one logged write attempt.
type Entry struct {
	Time   time.Time `json:"time"`
	Node   string    `json:"node"`
	Epoch  uint64    `json:"epoch"`
	Seq    uint64    `json:"seq"`
	Result string    `json:"result"`
	// Highest is the highest accepted epoch when the request arrived.
	Highest uint64 `json:"highest"`
}

// maxBody bounds a write request.
const maxBody = 64 << 10

// Store is the token-checking store; it is an http.Handler.
type Store struct {
	mu      sync.Mutex
	highest uint64
	entries []Entry
	file    *os.File // JSON lines; nil keeps the log in memory only
}

// New returns a store appending its log to path (created if missing; an
// existing log is continued and its highest accepted epoch restored, as a
// real store would remember its token across restarts). Empty path keeps
// the log in memory only.
func New(path string) (*Store, error) {
	s := &Store{}
	if path == "" {
		return s, nil
	}
	if old, err := ReadLog(path); err == nil {
		for _, e := range old {
			if e.Result == Accepted && e.Epoch > s.highest {
				s.highest = e.Epoch
			}
		}
		s.entries = old
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenstore: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tokenstore: log: %w", err)
	}
	s.file = f
	return s, nil
}

// Close closes the log file.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	return err
}

// Entries returns a copy of the log.
func (s *Store) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.entries...)
}

// Highest is the highest epoch accepted so far.
func (s *Store) Highest() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest
}

// Write applies one write and logs it; the check and the log append happen
// under one lock, so the log order is the order of decisions.
func (s *Store) Write(req WriteRequest) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := Entry{Time: time.Now(), Node: req.Node, Epoch: req.Epoch, Seq: req.Seq, Highest: s.highest}
	switch {
	case req.Node == "" || req.Epoch == 0:
		e.Result = Invalid
	case req.Epoch < s.highest:
		e.Result = Stale
	default:
		e.Result = Accepted
		s.highest = req.Epoch
	}
	s.entries = append(s.entries, e)
	if s.file != nil {
		b, _ := json.Marshal(e)
		if _, err := s.file.Write(append(b, '\n')); err != nil {
			return e, fmt.Errorf("tokenstore: appending to the log: %w", err)
		}
	}
	return e, nil
}

// ServeHTTP serves POST /write.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/write" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var req WriteRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		reply(w, http.StatusBadRequest, WriteResponse{Result: Invalid, Highest: s.Highest(), Error: "body: " + err.Error()})
		return
	}
	e, err := s.Write(req)
	if err != nil {
		reply(w, http.StatusInternalServerError, WriteResponse{Result: e.Result, Highest: s.Highest(), Error: err.Error()})
		return
	}
	switch e.Result {
	case Accepted:
		reply(w, http.StatusOK, WriteResponse{Result: Accepted, Highest: req.Epoch})
	case Stale:
		reply(w, http.StatusConflict, WriteResponse{Result: Stale, Highest: e.Highest,
			Error: fmt.Sprintf("epoch %d is stale: epoch %d already accepted", req.Epoch, e.Highest)})
	default:
		reply(w, http.StatusBadRequest, WriteResponse{Result: Invalid, Highest: e.Highest, Error: "node and a non-zero epoch are required"})
	}
}

func reply(w http.ResponseWriter, code int, body WriteResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(body)
}

// Server is a Store served over HTTP on loopback.
type Server struct {
	*Store
	URL  string // http://127.0.0.1:PORT
	srv  *http.Server
	done chan struct{}
}

// Start serves a store logging to logPath on addr, which must be a
// loopback address (port 0 picks a free one).
func Start(addr, logPath string) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("tokenstore: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("tokenstore: listen address %q: must be a loopback IP", addr)
	}
	st, err := New(logPath)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("tokenstore: listen %s: %w", addr, err)
	}
	s := &Server{Store: st, URL: "http://" + ln.Addr().String(), done: make(chan struct{}),
		srv: &http.Server{Handler: st, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s, nil
}

// Close stops serving and closes the log.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return errors.Join(err, s.Store.Close())
}

// ReadLog reads a JSON-lines log written by a Store.
func ReadLog(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseLog(b, path)
}

// ParseLog parses JSON-lines log content; name is used in errors.
func ParseLog(b []byte, name string) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", name, n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
