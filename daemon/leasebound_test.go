package daemon

import (
	"testing"

	"github.com/fenced/fenced/quorum"
)

func TestBoundOf(t *testing.T) {
	// Five nodes, majority three: the third-earliest contact bounds the
	// old primary's last renewal.
	got, ok := boundOf([]quorum.Mono{50, 10, 40, 20, 30}, 3)
	if !ok || got != quorum.Mono(30).Add(1e6) {
		t.Fatalf("bound %v %v", got, ok)
	}
	if _, ok := boundOf([]quorum.Mono{10, 20}, 3); ok {
		t.Fatal("bound from fewer answers than a majority")
	}
}
