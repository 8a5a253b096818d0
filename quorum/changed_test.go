package quorum

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestChangedWakes(t *testing.T) {
	f := NewFSM(10)
	ch := f.Changed()
	data, _ := json.Marshal(Command{Op: OpStandby, Node: "a", Flag: true})
	go f.Apply(&raft.Log{Data: data})
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("Changed did not wake on apply")
	}
	if !f.State().Standby["a"] {
		t.Fatal("standby not applied")
	}
}
