package daemon_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// chromium finds the headless browser of the page test. CI must have it
// (.ci/install-deps installs Debian's chromium): there, and with
// FENCED_CI set, a missing browser fails the test instead of skipping it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" || os.Getenv("FENCED_CI") != "" {
		t.Fatal("no chromium on PATH, and this is CI: .ci/install-deps installs it (Debian package chromium)")
	}
	t.Skip("no chromium on PATH (Debian: apt-get install chromium, or run .ci/install-deps)")
	return ""
}

// pageView is what the status page shows, read from its DOM.
type pageView struct {
	Node      string         `json:"node"`
	Epoch     uint64         `json:"epoch"`
	Primary   string         `json:"primary"`
	Freshness string         `json:"freshness"`
	NotUpd    bool           `json:"notUpdated"`
	Failovers []pageFailover `json:"failovers"`
	Nodes     [][]string     `json:"nodes"`
	HTML      string         `json:"html"`
}

type pageFailover struct {
	Epoch   uint64   `json:"epoch"`
	From    string   `json:"from"`
	To      string   `json:"to"`
	Outcome string   `json:"outcome"`
	Phases  []string `json:"phases"` // phase/node
}

const readPage = `(() => {
  const p = document.getElementById("primary");
  return {
    node: p.dataset.node || "", epoch: Number(p.dataset.epoch || 0), primary: p.textContent,
    freshness: document.getElementById("freshness").textContent,
    notUpdated: document.body.classList.contains("not-updated"),
    failovers: Array.from(document.querySelectorAll("#timeline g.failover")).map(g => ({
      epoch: Number(g.dataset.epoch), from: g.dataset.from, to: g.dataset.to, outcome: g.dataset.outcome,
      phases: Array.from(g.querySelectorAll("rect.phase")).map(r => r.dataset.phase + "/" + r.dataset.node)})),
    nodes: Array.from(document.querySelectorAll("#nodes tbody tr")).map(tr => Array.from(tr.cells).map(c => c.textContent)),
    html: document.documentElement.outerHTML,
  };
})()`

// TestStatusPageInBrowser loads the status page from a node that is not
// the primary in a real headless Chromium, kills the primary (SIGKILL),
// and reads the page again without reloading it: its own refresh must show
// the new primary with a higher epoch, the dead one off (fenced by the new
// one), and the failover's timeline with the fence of the old primary. A
// page that did not refresh itself would still show the old primary. It
// keeps a screenshot (PNG) in the test's artifact directory (go test
// -artifacts keeps it), and checks that neither the page nor its JSON
// holds a secret.
func TestStatusPageInBrowser(t *testing.T) {
	browser := chromium(t)
	var addrs []string
	for range 3 {
		p, err := devcluster.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	ctx := ctxT(t, 90*time.Second)
	// The browser starts first: its start takes seconds of CPU, which
	// must not disturb the cluster's first election.
	alloc, cancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 1800), chromedp.Flag("disable-gpu", true))...)
	defer cancel()
	tab, cancel := chromedp.NewContext(alloc)
	defer cancel()
	started := time.Now()
	if _, err := chromedp.Run(tab, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	t.Logf("%s started in %s", browser, time.Since(started).Round(time.Millisecond))
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true, Configure: func(cfg *config.Config) {
		// A monitor of the storage stand-in every 2s, not every 300ms:
		// on a loaded 2-core machine a browser beside the cluster would
		// time its monitor hook out and move the primacy about.
		cfg.Storage.MonitorInterval = config.Duration(2 * time.Second)
	}, NodeConfig: func(i int, cfg *config.Config) { cfg.Metrics.Listen = addrs[i] }})
	old, epoch, err := c.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watch := c.Other(old)
	url := "http://" + addrs[watch.Index] + "/"
	started = time.Now()
	if _, err := chromedp.Run(tab, chromedp.Navigate(url)); err != nil {
		t.Fatalf("load %s: %v", url, err)
	}
	t.Logf("chromium loaded %s in %s", url, time.Since(started).Round(time.Millisecond))
	view := func() pageView {
		t.Helper()
		v, err := chromedp.Run(tab, chromedp.Evaluate[pageView](readPage))
		if err != nil {
			t.Fatalf("read the page: %v", err)
		}
		return v
	}
	waitView := func(what string, d time.Duration, ok func(pageView) bool) pageView {
		t.Helper()
		var v pageView
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if v = view(); ok(v) {
				return v
			}
		}
		t.Fatalf("the page never showed %s; it shows primary %q (epoch %d), %q, failovers %+v, nodes %q", what, v.Primary, v.Epoch, v.Freshness, v.Failovers, v.Nodes)
		return v
	}
	before := waitView(old.Name+" as primary", 10*time.Second, func(v pageView) bool { return v.Node == old.Name && v.Epoch == epoch && !v.NotUpd })
	if len(before.Nodes) != 3 {
		t.Errorf("nodes table: %q", before.Nodes)
	}

	killed := time.Now()
	old.Kill()
	after := waitView("a new primary serving after the fence of "+old.Name, 20*time.Second, func(v pageView) bool {
		if v.Node == "" || v.Node == old.Name || v.Epoch <= epoch || v.NotUpd {
			return false
		}
		for _, f := range v.Failovers {
			if f.Epoch == v.Epoch && f.From == old.Name && f.To == v.Node && f.Outcome == "serving" && slices.Contains(f.Phases, "fence/"+old.Name) {
				return true
			}
		}
		return false
	})
	t.Logf("%s after the kill the page shows %q; failovers %+v", time.Since(killed).Round(time.Millisecond), after.Primary, after.Failovers)
	var fo pageFailover
	for _, f := range after.Failovers {
		if f.Epoch == after.Epoch {
			fo = f
		}
	}
	for _, want := range []string{"detect/" + old.Name, "elect/" + after.Node, "fence/" + old.Name, "start/" + after.Node} {
		if !slices.Contains(fo.Phases, want) {
			t.Errorf("the failover to epoch %d lacks the phase %s: %v", after.Epoch, want, fo.Phases)
		}
	}
	// The dead primary is shown off, fenced by the new one, not primary.
	// Until gossip gives it up (seconds), its last gossip is marked
	// stale: the page never shows two primaries unmarked.
	after = waitView(old.Name+" off", 15*time.Second, func(v pageView) bool {
		var primaries []string
		for _, row := range v.Nodes {
			if len(row) > 4 && (row[4] == "primary" || row[4] == "primary-elect") {
				primaries = append(primaries, row[0])
			}
		}
		if len(primaries) > 1 {
			t.Fatalf("the page shows %v as primary at once: %q", primaries, v.Nodes)
		}
		for _, row := range v.Nodes {
			if len(row) > 4 && row[0] == old.Name {
				return strings.Contains(row[2], "OFF (fenced") && strings.Contains(row[2], "by "+v.Node) && row[4] != "primary"
			}
		}
		return false
	})
	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100) /* 100: PNG */)
	if err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(t.ArtifactDir(), "status-page.png")
	if err := os.WriteFile(png, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", png, len(shot))
	if len(shot) < 8 || string(shot[1:4]) != "PNG" {
		t.Errorf("the screenshot is no PNG")
	}

	// No secret on the page or in its JSON: the BMC password (its file's
	// content), the gossip key.
	key, err := os.ReadFile(c.Config.Gossip.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"the BMC password": devcluster.BMCPassword, "the gossip key": strings.TrimSpace(string(key))}
	docs := map[string]string{"the page's DOM": after.HTML}
	for _, path := range []string{"/", "/status.json", "/page.js"} {
		resp, err := http.Get("http://" + addrs[watch.Index] + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: %s, CSP %q", path, resp.Status, resp.Header.Get("Content-Security-Policy"))
		}
		docs[path] = string(b)
	}
	for dn, doc := range docs {
		for sn, s := range secrets {
			if strings.Contains(doc, s) {
				t.Errorf("%s holds %s", dn, sn)
			}
		}
	}
	// Read-only: nothing but GET.
	resp, err := http.Post("http://"+addrs[watch.Index]+"/status.json", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /status.json: %s, want 405", resp.Status)
	}
}
