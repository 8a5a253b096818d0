// Package statuspage holds the read-only status page that fenced serves
// on metrics.listen beside /metrics: one HTML page, its script and its
// style, embedded in the binary (the page loads nothing from elsewhere).
// The script asks /status.json (api.Page) every few seconds and redraws;
// it builds every element from text, never from markup, except the
// timeline's SVG, which the daemon draws with its text escaped. Data it
// could not refresh is shown as not updated, with since when.
package statuspage

import (
	"embed"
	"io/fs"
)

//go:embed assets
var assets embed.FS

// Assets are the page's files: index.html, page.js, page.css.
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return sub
}
