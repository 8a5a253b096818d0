package tokenstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrStale is returned by a writer whose epoch the store rejected as stale:
// another node holds the storage with a newer token.
var ErrStale = errors.New("epoch rejected as stale")

// Writer writes to a store periodically with its epoch, as an application
// on the primary's storage would.
type Writer struct {
	URL      string // the store's base URL (…/write is added when missing)
	Node     string
	Epoch    uint64
	Interval time.Duration // default 100ms
	Client   *http.Client  // default: 2s timeout
	// Log receives one line per transient error; nil discards them.
	Log io.Writer
}

// RunWriter writes every interval until ctx ends (nil) or the store rejects
// a write as stale (an error matching ErrStale).
func RunWriter(ctx context.Context, url, node string, epoch uint64, interval time.Duration) error {
	return (&Writer{URL: url, Node: node, Epoch: epoch, Interval: interval}).Run(ctx)
}

// Run writes until ctx ends (nil), the store calls the epoch stale
// (ErrStale) or refuses the request as malformed. A store that cannot be
// reached is retried at the next tick: the token, not the network, decides
// who may write.
func (w *Writer) Run(ctx context.Context) error {
	if w.Node == "" || w.Epoch == 0 {
		return errors.New("tokenstore writer: node and a non-zero epoch are required")
	}
	url := strings.TrimRight(w.URL, "/")
	if !strings.HasSuffix(url, "/write") {
		url += "/write"
	}
	interval := w.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	client := w.Client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for seq := uint64(1); ; {
		err := w.write(ctx, client, url, seq)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			seq++
		case errors.Is(err, ErrStale), errors.Is(err, errInvalid):
			return err
		default:
			if w.Log != nil {
				fmt.Fprintf(w.Log, "tokenstore writer %s epoch %d: %v (retrying)\n", w.Node, w.Epoch, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

var errInvalid = errors.New("request refused as invalid")

// WriteOnce makes write seq, once: nil when the store accepted it, an error
// wrapping ErrStale when it refused the epoch as stale.
func (w *Writer) WriteOnce(ctx context.Context, seq uint64) error {
	client := w.Client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	url := strings.TrimRight(w.URL, "/")
	if !strings.HasSuffix(url, "/write") {
		url += "/write"
	}
	return w.write(ctx, client, url, seq)
}

func (w *Writer) write(ctx context.Context, client *http.Client, url string, seq uint64) error {
	body, _ := json.Marshal(WriteRequest{Node: w.Node, Epoch: w.Epoch, Seq: seq,
		Data: fmt.Sprintf("%s epoch %d write %d", w.Node, w.Epoch, seq)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("tokenstore writer: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	var wr WriteResponse
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	_ = json.Unmarshal(b, &wr)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("tokenstore writer %s: write %d with epoch %d: %w (store has epoch %d)", w.Node, seq, w.Epoch, ErrStale, wr.Highest)
	case http.StatusBadRequest:
		return fmt.Errorf("tokenstore writer %s: write %d: %w: %s", w.Node, seq, errInvalid, wr.Error)
	}
	return fmt.Errorf("POST %s: %s", url, resp.Status)
}
