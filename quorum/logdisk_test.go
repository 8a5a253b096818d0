package quorum

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
	"github.com/hashicorp/raft"
)

// BenchmarkRaftLogDisk drives the production raft (OpenRaft: durable bolt
// log, file snapshots, raftConfig's threshold and trailing logs, the
// default history bound) through many compactions, with the mix a cluster
// writes: a lease renewal's barrier every heartbeat and, every
// 90 heartbeats, a takeover's seven entries (election, grant, primacy, a
// fence pending then read back, the mount intent, mounted). Every size it
// has is bounded by a count of entries, not by age, so a year at any
// rate ends where this run ends: it reports raft.db, the snapshots and the
// live heap (raft's and the state machine's) in the third and the fourth
// quarter of the run, the data directory's highest, and the log's longest
// stretch between compactions.
//
// Only raft's check for a snapshot runs more often than in production
// (every 20 ms, not 30 s): at a heartbeat a second a production log grows
// by at most 60 entries between checks; here, by what the disk commits
// in 20 ms, which the report shows (the longest stretch).
//
// It fails when raft.db's highest, or the snapshots' or the live heap's
// median, is above the third quarter's in the fourth by more than 10 %:
// growth after every bound is reached, which a longer run would continue.
// (With raftConfig's TrailingLogs made unbounded, raft.db is 23 MiB in the
// third quarter and 31 MiB in the fourth, and it fails.) With
// FENCED_LOGDISK_PROFILES naming a directory, exact heap profiles are kept
// there half-way and at the end, for `go tool pprof -diff_base`.
//
//	go test ./quorum -run '^$' -bench RaftLogDisk -benchtime 1x
func BenchmarkRaftLogDisk(b *testing.B) {
	const (
		cycles   = 60 // snapshot thresholds' worth of entries: the history reaches its bound in the first fifth, raft.db its size by half-way
		perEvent = 90 // barriers between takeovers
	)
	if os.Getenv("FENCED_LOGDISK_PROFILES") != "" {
		runtime.MemProfileRate = 1
	}
	for b.Loop() {
		dir := b.TempDir()
		_, tr := raft.NewInmemTransport(raft.ServerAddress("a"))
		q, err := OpenRaft(RaftOptions{Self: "a", Peers: []Peer{{Name: "a", Raft: "a"}}, DataDir: dir,
			HeartbeatTimeout: 200 * time.Millisecond, Transport: tr, HistoryLimit: 1000, snapshotInterval: 20 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); !q.IsLeader(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("no leader")
			}
		}
		apply := func(c Command) any {
			res, err := q.Apply(c, 5*time.Second)
			if err != nil {
				b.Fatalf("%s: %v", c.Op, err)
			}
			return res
		}
		live := func() float64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return float64(ms.HeapAlloc) / (1 << 20)
		}
		// The third and fourth quarters of the run, both after the history
		// reached its bound: raft.db's highest (bolt never shrinks it), and
		// the snapshots' and the live heap's medians (while a snapshot is
		// written, the store holds three and the heap a copy of the state;
		// a leak moves the median), with their highest for the disk.
		type quarter struct {
			db, snapsMax float64
			snaps, heaps []float64
		}
		var late [2]quarter
		var stretch uint64
		bounded := 0 // the entry at which the history reached its bound
		now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
		total := cycles * int(raftConfig("a", time.Second, slog.New(slog.DiscardHandler)).SnapshotThreshold)
		holder := "a"
		for n := 1; n <= total; n++ {
			if n%perEvent != 0 {
				if err := q.Confirm(5 * time.Second); err != nil {
					b.Fatal(err)
				}
			} else {
				from, to := holder, fmt.Sprintf("node%d", n/perEvent%3+1)
				g := apply(Command{Op: OpAcquire, Node: to, Time: now}).(Grant)
				apply(Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindElection, Target: to, Epoch: g.Epoch,
					Reason: "leader silent for a majority", Executor: to, Started: now, Finished: now, Outcome: fencing.OutcomeSuccess}})
				apply(Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindPrimacy, Target: to, Epoch: g.Epoch,
					Reason: "elected: epoch granted", Executor: to, Started: now, Finished: now, Outcome: fencing.OutcomeSuccess}})
				fence := fencing.Record{Kind: fencing.KindFence, Target: from, Action: fencing.ActionOff, Epoch: g.Epoch,
					Reason: fmt.Sprintf("takeover by %s at epoch %d", to, g.Epoch), RequestedBy: to + " (takeover)", Executor: to,
					Started: now, Outcome: fencing.OutcomePending, TargetBoot: "5d1c0b7e-7f0e-4a4b-9d0c-6f4f5a2b9e11"}
				id := apply(Command{Op: OpRecord, Record: &fence}).(uint64)
				fence.ID, fence.Outcome, fence.Finished = id, fencing.OutcomeSuccess, now.Add(3*time.Millisecond)
				fence.Attempts = []fencing.Attempt{{Level: 1, Device: from + "-bmc", Agent: "ipmi", Action: "off", Try: 1,
					Result: fencing.ResultSuccess, ReadBack: "off", Duration: 3 * time.Millisecond, ReadBackDuration: time.Millisecond}}
				apply(Command{Op: OpRecord, Record: &fence})
				apply(Command{Op: OpState, Node: to, Epoch: g.Epoch, State: HolderMounting})
				apply(Command{Op: OpState, Node: to, Epoch: g.Epoch, State: HolderMounted})
				holder = to
				now = now.Add(90 * time.Second)
			}
			if bounded == 0 && len(q.FSM().State().History) == 1000 {
				bounded = n
			}
			if n%256 == 0 {
				first, _ := q.logs.FirstIndex()
				last, _ := q.logs.LastIndex()
				stretch = max(stretch, last-first+1)
				if n > total/2 {
					h := &late[min(2*(n-total/2-1)/(total/2), 1)]
					h.db = max(h.db, fileMiB(filepath.Join(dir, "raft.db")))
					sn := dirMiB(filepath.Join(dir, "snapshots"))
					h.snaps, h.snapsMax = append(h.snaps, sn), max(h.snapsMax, sn)
					h.heaps = append(h.heaps, live())
				}
				if d := os.Getenv("FENCED_LOGDISK_PROFILES"); d != "" && (n == total/2 || n == total-total%256) {
					f, _ := os.Create(filepath.Join(d, fmt.Sprintf("heap-%d.pb.gz", n)))
					pprof.WriteHeapProfile(f)
					f.Close()
				}
			}
		}
		st := q.FSM().State()
		if err := q.Shutdown(); err != nil {
			b.Fatal(err)
		}
		if bounded == 0 || bounded > total/2 {
			b.Fatalf("the history reached its bound at entry %d of %d, not in the first half: the run shows nothing", bounded, total)
		}
		med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
		h3, h4 := med(late[0].heaps), med(late[1].heaps)
		s3, s4 := med(late[0].snaps), med(late[1].snaps)
		disk := max(late[0].db, late[1].db) + max(late[0].snapsMax, late[1].snapsMax)
		b.Logf("%d entries (%d takeovers, epoch %d; the history at its bound of %d records from entry %d): in the third and the fourth quarter, raft.db %.2f and %.2f MiB at most, snapshots %.3f and %.3f MiB (median; %.3f at most), live heap %.2f and %.2f MiB (median); the data directory's highest %.2f MiB; the log's longest stretch %d entries",
			total, total/perEvent, st.Epoch, len(st.History), bounded, late[0].db, late[1].db, s3, s4, max(late[0].snapsMax, late[1].snapsMax), h3, h4, disk, stretch)
		for _, g := range []struct {
			what          string
			third, fourth float64
		}{{"raft.db", late[0].db, late[1].db}, {"snapshots", s3, s4}, {"live heap", h3, h4}} {
			if g.fourth > g.third*1.1 {
				b.Errorf("%s grows once every bound is reached: %.2f MiB in the third quarter, %.2f MiB in the fourth", g.what, g.third, g.fourth)
			}
		}
		b.ReportMetric(late[1].db, "raftdb-MiB")
		b.ReportMetric(s4, "snapshots-MiB")
		b.ReportMetric(disk, "disk-max-MiB")
		b.ReportMetric(h4, "live-heap-MiB")
		b.ReportMetric(float64(stretch), "log-entries-max")
	}
}

// fileMiB is the size of the file at path in MiB (0 if there is none).
func fileMiB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// dirMiB is the size of the files under dir in MiB.
func dirMiB(dir string) float64 {
	var total int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			total += fi.Size()
		}
		return nil
	})
	return float64(total) / (1 << 20)
}
