package quorum

import (
	"strings"
	"testing"
)

// Metadata over memberlist's limit drops the resources' states, not the
// whole of it: the node still advertises its role, epoch and beacons.
func TestNodeMetaOverLimit(t *testing.T) {
	m := &Membership{}
	m.meta.Store(&Meta{Role: "primary", Epoch: 7, Resources: strings.Repeat("r", 600)})
	b := (*mlDelegate)(m).NodeMeta(512)
	if len(b) == 0 || len(b) > 512 {
		t.Fatalf("metadata of %d bytes", len(b))
	}
	got, err := decodeMeta(b)
	if err != nil || got.Role != "primary" || got.Epoch != 7 || got.Beacon != beaconVersion || got.SupportsVersion() != ClusterVersionMax || got.Resources != "" {
		t.Fatalf("advertised %+v (%v)", got, err)
	}
	m.meta.Store(&Meta{Role: "secondary", Resources: "rrs"})
	if got, _ := decodeMeta((*mlDelegate)(m).NodeMeta(512)); got.Resources != "rrs" {
		t.Fatalf("resources under the limit not advertised: %+v", got)
	}
}
