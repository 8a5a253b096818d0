package quorum

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
	"github.com/hashicorp/raft"
)

// BenchmarkHistoryHeap measures the live heap the replicated history holds
// as fences are recorded, at the default bound (1,000 records): it must
// stop growing at the bound. A record is as a takeover's fence leaves it
// (one attempt read back, the reasons and names of a real one) plus the
// election and primacy records around it. It reports the heap per record
// and at 1,000, 2,000 and 5,000 records applied.
//
//	go test ./quorum -run '^$' -bench HistoryHeap -benchtime 1x
func BenchmarkHistoryHeap(b *testing.B) {
	for b.Loop() {
		f := NewFSM(1000)
		var idx uint64
		apply := func(r fencing.Record) {
			idx++
			data, _ := json.Marshal(Command{Op: OpRecord, Record: &r})
			f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data})
		}
		live := func() float64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return float64(ms.HeapAlloc)
		}
		base := live()
		at := map[int]float64{}
		now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
		for n := 1; n <= 5000; n++ {
			target := fmt.Sprintf("node%d", n%3+1)
			switch n % 3 {
			case 0:
				apply(fencing.Record{Kind: fencing.KindFence, Target: target, Action: fencing.ActionOff, Epoch: uint64(n),
					Reason: fmt.Sprintf("takeover by node%d at epoch %d", (n+1)%3+1, n), RequestedBy: "node2 (takeover)", Executor: "node2",
					Started: now, Finished: now.Add(3 * time.Millisecond), Outcome: fencing.OutcomeSuccess, TargetBoot: "5d1c0b7e-7f0e-4a4b-9d0c-6f4f5a2b9e11",
					Attempts: []fencing.Attempt{{Level: 1, Device: target + "-bmc", Agent: "ipmi", Action: "off", Try: 1, Result: fencing.ResultSuccess,
						ReadBack: "off", Duration: 3 * time.Millisecond, ReadBackDuration: time.Millisecond}}})
			case 1:
				apply(fencing.Record{Kind: fencing.KindElection, Target: target, Epoch: uint64(n), Reason: "leader silent for a majority",
					Executor: "node1", Started: now, Finished: now, Outcome: fencing.OutcomeSuccess})
			default:
				apply(fencing.Record{Kind: fencing.KindPrimacy, Target: target, Epoch: uint64(n), Reason: "elected: epoch granted",
					Executor: target, Started: now, Finished: now, Outcome: fencing.OutcomeSuccess})
			}
			if n == 1000 || n == 2000 || n == 5000 {
				at[n] = live() - base
			}
			now = now.Add(30 * time.Second)
		}
		if got := len(f.State().History); got != 1000 {
			b.Fatalf("history holds %d records, want the bound 1000", got)
		}
		b.ReportMetric(at[1000]/1000, "B/record")
		for _, n := range []int{1000, 2000, 5000} {
			b.ReportMetric(at[n]/(1<<20), fmt.Sprintf("MiB-at-%d", n))
		}
	}
}
