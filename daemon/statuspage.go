package daemon

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/api/timeline"
	"github.com/fenced/fenced/daemon/statuspage"
	"github.com/fenced/fenced/stonith/fencing"
)

// The status page: read-only, on metrics.listen beside /metrics (where
// Prometheus already reaches), never on the API socket's side. / is the
// page (package statuspage), /status.json what it shows (api.Page). It
// shows what `fencectl status` shows, with the same stale marks, and
// holds no secret: the status, the device list and the history hold none.

// pageRefresh is how often the page asks again.
const pageRefresh = time.Second

// pageCache is how long one document serves every page that asks: a page
// per operator, polling every second, must not copy the history each time.
const pageCache = 500 * time.Millisecond

// pageDoc keeps the newest document.
type pageDoc struct {
	mu   sync.Mutex
	at   time.Time
	body []byte
}

// statusPageRoutes adds the page to the metrics server's mux.
func (d *Daemon) statusPageRoutes(mux *http.ServeMux) {
	files := http.FileServerFS(statuspage.Assets())
	var cache pageDoc
	page := func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		files.ServeHTTP(w, r)
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /page.js", page)
	mux.HandleFunc("GET /page.css", page)
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		body := cache.get(func() []byte {
			b, err := json.MarshalIndent(d.PageNow(), "", "  ")
			if err != nil {
				b, _ = json.Marshal(api.Error{SchemaVersion: SchemaVersion, Message: "status page: " + err.Error(), Code: api.CodeFailed})
			}
			return b
		})
		pageHeaders(w)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(body)
	})
}

// pageHeaders keep the page to its own files: no script or style from
// elsewhere, no framing.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

func (c *pageDoc) get(build func() []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.body == nil || time.Since(c.at) >= pageCache {
		c.body, c.at = build(), time.Now()
	}
	return c.body
}

// PageNow builds the status page's document.
func (d *Daemon) PageNow() api.Page {
	now := time.Now()
	hist := d.raft.FSM().State().History
	p := api.Page{SchemaVersion: SchemaVersion, Generated: now.UTC(), RefreshSec: pageRefresh.Seconds(), Status: d.StatusNow(),
		Resources: d.ResourcesNow(), Devices: d.devices(), Pending: []api.Record{}}
	for _, r := range hist {
		if r.Outcome == fencing.OutcomePending && fencing.Stopping(r.Kind) {
			p.Pending = append(p.Pending, r)
		}
	}
	p.History = hist[max(len(hist)-api.PageHistory, 0):]
	p.Failovers = timeline.Build(hist, now, api.PageFailovers)
	if p.Failovers == nil {
		p.Failovers = []timeline.Failover{}
	}
	p.TimelineSVG = timeline.SVG(p.Failovers, time.Local)
	return p
}
