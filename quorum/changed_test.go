package quorum

import (
	"testing"
	"time"
)

func TestChangedWakes(t *testing.T) {
	f := NewFSM(10)
	ch := f.Changed()
	go apply(t, f, Command{Op: OpStandby, Node: "a", Flag: true})
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("Changed did not wake on apply")
	}
	if !f.State().Standby["a"] {
		t.Fatal("standby not applied")
	}
}
