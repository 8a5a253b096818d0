package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
)

// profile is a set of lease timings: each obeys tenure.Timing.Check, and
// together they cover the corners (the smallest margin allowed, a grace
// just under the lease, heartbeats as long as allowed).
type profile struct {
	name    string
	timing  tenure.Timing
	monitor time.Duration
}

var profiles = []profile{
	{"short", tenure.Timing{Heartbeat: 200 * time.Millisecond, Lease: time.Second, Margin: 100 * time.Millisecond,
		Grace: 500 * time.Millisecond, FenceTimeout: time.Second}, 300 * time.Millisecond},
	{"tight-margin", tenure.Timing{Heartbeat: 150 * time.Millisecond, Lease: time.Second, Margin: 50 * time.Millisecond,
		Grace: 900 * time.Millisecond, FenceTimeout: time.Second}, 250 * time.Millisecond},
	{"default/3", tenure.Timing{Heartbeat: 333 * time.Millisecond, Lease: time.Second, Margin: 167 * time.Millisecond,
		Grace: 667 * time.Millisecond, FenceTimeout: time.Second}, 667 * time.Millisecond},
	{"long-heartbeat", tenure.Timing{Heartbeat: 450 * time.Millisecond, Lease: time.Second, Margin: 50 * time.Millisecond,
		Grace: 400 * time.Millisecond, FenceTimeout: time.Second}, 500 * time.Millisecond},
}

// altProfiles are timings a node may run instead of the schedule's
// profile (Schedule.Timings): what a cluster looks like while a change of
// timing rolls through it (`fencectl config accept`, then restarts).
var altProfiles = []profile{
	{"long", tenure.Timing{Heartbeat: 500 * time.Millisecond, Lease: 2500 * time.Millisecond, Margin: 250 * time.Millisecond,
		Grace: 1500 * time.Millisecond, FenceTimeout: time.Second}, 500 * time.Millisecond},
	{"short-grace", tenure.Timing{Heartbeat: 200 * time.Millisecond, Lease: time.Second, Margin: 100 * time.Millisecond,
		Grace: 200 * time.Millisecond, FenceTimeout: time.Second}, 300 * time.Millisecond},
}

// timingProfile is profile i: one of profiles, then one of altProfiles.
func timingProfile(i int) profile {
	if i < len(profiles) {
		return profiles[i]
	}
	return altProfiles[i-len(profiles)]
}

// Kind is a kind of fault.
type Kind uint8

const (
	Partition  Kind = iota // the network splits (Arg: the shape)
	Loss                   // messages are lost (Arg: per mille)
	Slow                   // messages are delayed (Arg: up to ms)
	Pause                  // the daemon stops (SIGSTOP) for Dur
	Crash                  // the daemon is killed; restarts after Dur (0: at the heal)
	Power                  // the node loses power; back after Dur (0: at the heal)
	Shutdown               // graceful stop (SIGTERM); restarts after Dur
	Device                 // a fence device misbehaves for Dur (Arg: level | mode<<4)
	Storage                // a storage operation misbehaves for Dur (Arg: op | mode<<4)
	Handover               // an admin asks the leader to hand over (to Node, or any if Arg)
	Confirm                // an admin confirms Node is down (only done if it is off)
	Standby                // an admin puts Node in standby for Dur
	AdminFence             // an admin fences Node (`fencectl fence`), through the leader
	Ineligible             // Node may not take primacy for Dur (its configuration differs, say)
	Stall                  // raft's streams stall on random links for Dur (Mask); datagrams pass
	Move                   // an admin moves group Arg (≥ 1) to Node (`fencectl move`), through the leader
	numKinds
)

var kindNames = [...]string{"partition", "loss", "slow", "pause", "crash", "power", "shutdown", "device", "storage",
	"handover", "confirm", "standby", "admin-fence", "ineligible", "stall", "move"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Partition shapes.
const (
	shapeSplit   = iota // two groups (Mask: the nodes of one)
	shapeIsolate        // Node alone
	shapeBridge         // Node sees both sides (Mask: one side); the sides do not see each other
	shapeOneWay         // messages from Node to node Mask are lost; the other way works
	shapeRandom         // each directed link cut if its bit in Mask is set
	numShapes
)

var shapeNames = [...]string{"split", "isolate", "bridge", "one-way", "random"}

// Storage operations.
const (
	stOpStart = iota
	stOpStop
	stOpMonitor
)

var stOpNames = [...]string{"start", "stop", "monitor"}

// Fault is one fault of a schedule.
type Fault struct {
	At   time.Duration
	Kind Kind
	Node int
	// Primary aims the fault at the node acting as primary when it starts
	// (or the one holding an epoch, or raft's leader); Node if none.
	Primary bool
	Dur     time.Duration
	Arg     int
	Mask    uint64
}

func (f Fault) String() string {
	node := nodeName(f.Node)
	if f.Primary {
		node = "p:" + node
	}
	return fmt.Sprintf("%s %s %s %s %d %#x", f.At, f.Kind, node, f.Dur, f.Arg, f.Mask)
}

// Describe says what the fault does, for traces.
func (f Fault) Describe(nodes int) string {
	n := nodeName(f.Node)
	if f.Primary {
		n = "the primary (else " + n + ")"
	}
	switch f.Kind {
	case Partition:
		s := shapeNames[f.Arg%numShapes]
		switch f.Arg % numShapes {
		case shapeSplit:
			return fmt.Sprintf("partition %s %v | rest for %s", s, maskNodes(f.Mask, nodes), f.Dur)
		case shapeIsolate:
			return fmt.Sprintf("partition: %s isolated for %s", n, f.Dur)
		case shapeBridge:
			return fmt.Sprintf("partition: %s bridges %v and the rest for %s", n, maskNodes(f.Mask, nodes), f.Dur)
		case shapeOneWay:
			return fmt.Sprintf("partition: %s → %s cut (one way) for %s", n, nodeName(int(f.Mask)%nodes), f.Dur)
		}
		return fmt.Sprintf("partition: random links cut (%#x) for %s", f.Mask, f.Dur)
	case Loss:
		return fmt.Sprintf("%.1f%% message loss for %s", float64(f.Arg)/10, f.Dur)
	case Slow:
		return fmt.Sprintf("messages delayed up to %dms for %s", f.Arg, f.Dur)
	case Device:
		lvl := fmt.Sprintf("level %d", f.Arg&0xf+1)
		if f.Arg&0xf >= levels {
			lvl = "every level"
		}
		return fmt.Sprintf("fence devices of %s, %s: %s for %s", n, lvl, devNames[(f.Arg>>4)%int(numDevModes)], f.Dur)
	case Storage:
		return fmt.Sprintf("storage %s on %s: %s for %s", stOpNames[(f.Arg&0xf)%3], n, opNames[(f.Arg>>4)%int(numOpModes)], f.Dur)
	case Handover:
		if f.Arg != 0 {
			return "handover to any node"
		}
		return "handover to " + n
	case Confirm:
		return "admin confirms " + n + " is down"
	case Standby:
		return fmt.Sprintf("%s in standby for %s", n, f.Dur)
	case AdminFence:
		return "admin fences " + n
	case Ineligible:
		return fmt.Sprintf("%s ineligible for %s", n, f.Dur)
	case Stall:
		return fmt.Sprintf("raft's streams stalled on random links (%#x) for %s; datagrams pass", f.Mask, f.Dur)
	case Move:
		return fmt.Sprintf("admin moves group %s to %s", groupName(f.Arg), n)
	case Crash, Power, Shutdown:
		if f.Dur == 0 {
			return fmt.Sprintf("%s %s (back at the heal)", f.Kind, n)
		}
		return fmt.Sprintf("%s %s (back after %s)", f.Kind, n, f.Dur)
	}
	return fmt.Sprintf("%s %s for %s", f.Kind, n, f.Dur)
}

func maskNodes(mask uint64, nodes int) []string {
	var s []string
	for i := range nodes {
		if mask&(1<<i) != 0 {
			s = append(s, nodeName(i))
		}
	}
	return s
}

// Down is a node left down when the faults heal: powered off, or its
// daemon dead (the storage it may have started still mounted).
type Down struct {
	Node int
	Off  bool
}

// Schedule fixes a whole run.
type Schedule struct {
	Seed    uint64 // the noise: delays, losses, timeouts, boot clocks
	Nodes   int
	Profile int
	Storage bool
	Quiet   bool    // fixed delays, no jitter (shrinking tries it)
	PPM     []int64 // each node's clock rate error, within ±Drift
	Faults  []Fault
	// Heal ends the faults: the network heals, paused nodes resume, down
	// nodes come back (but Down), devices and storage work (but the first
	// fence level of the CalmDev nodes, whose second level works).
	Heal    time.Duration
	Down    []Down
	CalmDev []int
	Modes
}

// Modes are the configuration paths beyond a power fence read back off:
// each is a way a successor may take over, or a node may stop or come
// back, that the base schedule does not take.
type Modes struct {
	// Tokens: the storage checks tokens (storage.checks_tokens), so a
	// former holder may be taken over once its lease has certainly ended.
	Tokens bool
	// VIP: the group also runs a resource that checks no tokens and that
	// no storage-level fence stops (a floating address).
	VIP bool
	// Witness nodes vote and never hold the storage; they have no fence
	// devices.
	Witness []int
	// SCSI nodes' first fence level cuts their access to the storage
	// (SCSI-3 reservations) instead of their power; with SCSIOnly, both
	// levels do. Each unfences itself at start.
	SCSI     []int
	SCSIOnly []int
	// Watchdog nodes have a watchdog device (watchdog.device); WDLevel
	// ones also the watchdog fence level last in their topology; NoMagic
	// ones a driver without magic close (closing the device disarms it).
	Watchdog []int
	WDLevel  []int
	NoMagic  []int
	// NoSysrq nodes cannot reset themselves through sysrq.
	NoSysrq []int
	// SlowStop nodes' stops take most of their grace (an unmount that
	// flushes), and finish within it.
	SlowStop []int
	// Stray nodes leave, when their daemon dies holding the storage, a
	// writer the probe at the next start cannot see (an application the
	// group does not know of, still writing).
	Stray []int
	// Blind nodes hold a wrong password for every fence device: their
	// device checks fail, and so does every fence they run themselves
	// (refused, nothing touched); as leaders they hand their fences to a
	// node that can run them.
	Blind []int
	// Timings are each node's timing profile when they differ (a change of
	// timing rolling through the cluster): index into profiles, then
	// altProfiles. Empty: every node runs Profile.
	Timings []int
	// Groups is how many resource groups the cluster runs (0 or 1: the
	// default group alone). Each has its own machine on every node, its
	// own holder, epoch and lease, and its own storage; the first is the
	// default group, the others are named g2, g3… (docs/groups.md).
	Groups int
}

func has(ns []int, i int) bool { return slices.Contains(ns, i) }

// witness reports a witness node.
func (sc Schedule) witness(i int) bool { return has(sc.Witness, i) }

// Generate derives a schedule from seed.
func Generate(seed uint64) Schedule {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	sc := Schedule{Seed: seed}
	sc.Nodes = []int{3, 3, 3, 3, 5, 5, 5, 7}[r.IntN(8)]
	sc.Profile = r.IntN(len(profiles))
	sc.Storage = r.IntN(2) == 0
	sc.Quiet = r.IntN(10) == 0
	for range sc.Nodes {
		ppm := r.Int64N(2*Drift+1) - Drift
		if r.IntN(3) == 0 {
			ppm = []int64{-Drift, Drift}[r.IntN(2)]
		}
		sc.PPM = append(sc.PPM, ppm)
	}
	lease := profiles[sc.Profile].timing.Lease
	sc.Heal = uniform(r, 2*lease, 6*lease)
	k := 1 + r.IntN(12)
	for range k {
		sc.Faults = append(sc.Faults, genFault(r, sc, lease))
	}
	// Broken fence devices from the start: a dead BMC is common, and a
	// takeover that meets one is where the rules are tested hardest.
	if r.IntN(5) < 2 {
		sc.Faults = append(sc.Faults, Fault{Kind: Device, Node: r.IntN(sc.Nodes), Dur: sc.Heal,
			Arg: r.IntN(2*levels) | (1+r.IntN(int(numDevModes)-1))<<4})
	}
	slices.SortStableFunc(sc.Faults, func(a, b Fault) int { return int(a.At - b.At) })
	// Down nodes leave a majority even once the takeover fenced one more
	// (the former holder): a takeover at a bare majority can cost the
	// majority it needs (see livenessBound).
	if spare := (sc.Nodes-1)/2 - 1; spare > 0 && r.IntN(3) == 0 {
		down := 1 + r.IntN(spare)
		for _, i := range r.Perm(sc.Nodes)[:down] {
			sc.Down = append(sc.Down, Down{Node: i, Off: r.IntN(2) == 0})
		}
	}
	if r.IntN(4) == 0 {
		for i := range sc.Nodes {
			if r.IntN(2) == 0 {
				sc.CalmDev = append(sc.CalmDev, i)
			}
		}
	}
	genModes(&sc)
	genStalls(&sc)
	genGroups(&sc)
	return sc
}

// maxGroups is the most resource groups a schedule may run.
const maxGroups = 8

// genGroups gives a third of the schedules two or three resource groups,
// from a stream of their own so that the rest of a seed's schedule is
// what it was before groups existed.
func genGroups(sc *Schedule) {
	r := rand.New(rand.NewPCG(sc.Seed, 0x67726f757073))
	if r.IntN(3) != 0 {
		return
	}
	sc.Groups = 2 + r.IntN(2)
	// An admin's moves of a group held by a live node: the takeover
	// whose former holder is alive and renewing.
	lease := profiles[sc.Profile].timing.Lease
	for range r.IntN(4) {
		sc.Faults = append(sc.Faults, Fault{At: uniform(r, lease/4, sc.Heal), Kind: Move, Node: r.IntN(sc.Nodes), Arg: 1 + r.IntN(sc.Groups-1)})
	}
	slices.SortStableFunc(sc.Faults, func(a, b Fault) int { return int(a.At - b.At) })
}

// genStalls adds, in a third of the schedules, stalls of raft's streams on
// random links (datagrams pass: only renewal rounds renew the lease across
// them), from a stream of their own so that the rest of a seed's schedule
// is what it was before stalls existed.
func genStalls(sc *Schedule) {
	r := rand.New(rand.NewPCG(sc.Seed, 0x7374616c6c))
	if r.IntN(3) != 0 {
		return
	}
	lease := profiles[sc.Profile].timing.Lease
	for range 1 + r.IntN(3) {
		sc.Faults = append(sc.Faults, Fault{At: uniform(r, lease/4, sc.Heal), Kind: Stall, Node: r.IntN(sc.Nodes),
			Dur: uniform(r, lease/3, 3*lease), Mask: r.Uint64() & r.Uint64()})
	}
	slices.SortStableFunc(sc.Faults, func(a, b Fault) int { return int(a.At - b.At) })
}

// genModes draws the schedule's modes from a stream of their own, so that
// the rest of a seed's schedule is what it was before modes existed.
func genModes(sc *Schedule) {
	r := rand.New(rand.NewPCG(sc.Seed, 0x6d6f646573))
	lease := profiles[sc.Profile].timing.Lease
	pick := func(pct int, from []int) []int {
		var out []int
		for _, i := range from {
			if r.IntN(100) < pct {
				out = append(out, i)
			}
		}
		return out
	}
	all := make([]int, sc.Nodes)
	for i := range all {
		all[i] = i
	}
	down := map[int]bool{}
	for _, d := range sc.Down {
		down[d.Node] = true
	}
	if sc.Storage {
		sc.Tokens = r.IntN(4) == 0
		sc.VIP = r.IntN(3) == 0
	}
	// One witness now and then, never a node left down (a majority of
	// data nodes must remain to take over).
	if r.IntN(6) == 0 {
		if w := r.IntN(sc.Nodes); !down[w] {
			sc.Witness = []int{w}
		}
	}
	var data []int
	for _, i := range all {
		if !sc.witness(i) {
			data = append(data, i)
		}
	}
	// A storage-level fence stops nothing but the node's use of the
	// storage: a floating address keeps running there (fenced validate
	// warns of such a topology), so SCSI nodes only with a group that
	// runs on the storage alone.
	if sc.Storage && !sc.VIP && r.IntN(4) == 0 {
		sc.SCSI = pick(60, data)
		sc.SCSIOnly = pick(50, sc.SCSI)
	}
	if r.IntN(4) == 0 {
		sc.Watchdog = pick(60, data)
		sc.WDLevel = pick(60, sc.Watchdog)
		sc.NoMagic = pick(40, sc.Watchdog)
	}
	if r.IntN(5) == 0 {
		sc.NoSysrq = pick(50, all)
	}
	if sc.Storage && r.IntN(4) == 0 {
		sc.SlowStop = pick(60, data)
	}
	if sc.Storage && r.IntN(4) == 0 {
		sc.Stray = pick(50, data)
	}
	// The paths without a fence are taken only when a fence fails: a dead
	// BMC for the whole run, on a node that may take one.
	dead := func(from []int) {
		if len(from) > 0 && r.IntN(2) == 0 {
			sc.Faults = append(sc.Faults, Fault{Kind: Device, Node: from[r.IntN(len(from))], Dur: sc.Heal,
				Arg: levels | int(devFail)<<4})
		}
	}
	if sc.Tokens {
		dead(data)
	}
	// The watchdog level: every node that has it with a dead BMC, and
	// the primary's daemon killed, down until the heal.
	if len(sc.WDLevel) > 0 && r.IntN(2) == 0 {
		for _, n := range sc.WDLevel {
			sc.Faults = append(sc.Faults, Fault{Kind: Device, Node: n, Dur: sc.Heal, Arg: levels | int(devFail)<<4})
		}
		sc.Faults = append(sc.Faults, Fault{At: uniform(r, lease, sc.Heal), Kind: Crash, Node: sc.WDLevel[0], Primary: true})
	}
	if r.IntN(5) == 0 {
		n := len(profiles) + len(altProfiles)
		for range sc.Nodes {
			p := sc.Profile
			if r.IntN(2) == 0 {
				p = r.IntN(n)
			}
			sc.Timings = append(sc.Timings, p)
		}
	}
	// A node that may not take primacy for a while (its configuration
	// differs from the cluster's, its unfence failed).
	for range r.IntN(3) {
		sc.Faults = append(sc.Faults, Fault{At: uniform(r, lease/4, sc.Heal), Kind: Ineligible, Node: r.IntN(sc.Nodes),
			Primary: r.IntN(2) == 0, Dur: uniform(r, lease/3, 3*lease)})
	}
	// A blind node, from a stream of its own (the other modes of a seed
	// stay what they were). One, and only with three data nodes that come
	// back by the heal: whatever node must be fenced, one that is neither
	// it nor blind can then fence it, as liveness requires.
	rb := rand.New(rand.NewPCG(sc.Seed, 0x626c696e64))
	var back []int
	for _, i := range data {
		if !down[i] {
			back = append(back, i)
		}
	}
	if rb.IntN(4) == 0 && len(back) >= 3 {
		sc.Blind = []int{back[rb.IntN(len(back))]}
	}
	slices.SortStableFunc(sc.Faults, func(a, b Fault) int { return int(a.At - b.At) })
}

func genFault(r *rand.Rand, sc Schedule, lease time.Duration) Fault {
	f := Fault{At: uniform(r, lease/4, sc.Heal), Node: r.IntN(sc.Nodes)}
	weights := []int{Partition: 20, Loss: 5, Slow: 5, Pause: 15, Crash: 14, Power: 6, Shutdown: 5, Device: 14,
		Storage: 10, Handover: 10, Confirm: 3, Standby: 5, AdminFence: 3}
	if !sc.Storage {
		weights[Storage] = 0
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	x := r.IntN(total)
	for k, w := range weights {
		if x < w {
			f.Kind = Kind(k)
			break
		}
		x -= w
	}
	switch f.Kind {
	case Pause, Crash, Power, Shutdown, Device, Storage, Partition, Standby, AdminFence:
		f.Primary = r.IntN(2) == 0
	}
	switch f.Kind {
	case Partition:
		f.Arg = r.IntN(numShapes)
		f.Dur = uniform(r, lease/3, 4*lease)
		switch f.Arg {
		case shapeSplit, shapeBridge:
			f.Mask = r.Uint64() & (1<<sc.Nodes - 1)
		case shapeOneWay:
			f.Mask = uint64((f.Node + 1 + r.IntN(sc.Nodes-1)) % sc.Nodes)
		case shapeRandom:
			f.Mask = r.Uint64() & r.Uint64()
		}
	case Loss:
		f.Arg = 10 + r.IntN(400)
		f.Dur = uniform(r, lease/3, 3*lease)
	case Slow:
		f.Arg = 5 + r.IntN(int(lease/time.Millisecond)/3)
		f.Dur = uniform(r, lease/3, 3*lease)
	case Pause:
		f.Dur = uniform(r, lease/10, 3*lease)
	case Crash, Power:
		if r.IntN(5) > 0 {
			f.Dur = uniform(r, lease/10, 3*lease)
		}
	case Shutdown:
		f.Dur = uniform(r, lease/5, 3*lease)
	case Device:
		// One level, or the whole node's (a dead BMC and its PDU alike).
		f.Arg = r.IntN(2*levels) | (1+r.IntN(int(numDevModes)-1))<<4
		f.Dur = uniform(r, sc.Heal/4, 2*sc.Heal)
	case Storage:
		f.Arg = r.IntN(3) | (1+r.IntN(int(numOpModes)-1))<<4
		f.Dur = uniform(r, lease/2, 2*sc.Heal)
	case Handover:
		f.Arg = r.IntN(2)
	case Standby:
		f.Dur = uniform(r, lease/2, 3*lease)
	}
	return f
}

// String is the schedule in the form Parse reads (and -sim.replay takes).
func (sc Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d nodes=%d profile=%d storage=%t quiet=%t heal=%s ppm=", sc.Seed, sc.Nodes, sc.Profile, sc.Storage, sc.Quiet, sc.Heal)
	for i, p := range sc.PPM {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, p)
	}
	b.WriteString(" down=")
	for i, d := range sc.Down {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%s", nodeName(d.Node), map[bool]string{true: "off", false: "crash"}[d.Off])
	}
	b.WriteString(" calmdev=")
	for i, n := range sc.CalmDev {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(nodeName(n))
	}
	list := func(key string, ns []int) {
		if len(ns) == 0 {
			return
		}
		fmt.Fprintf(&b, " %s=", key)
		for i, n := range ns {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(nodeName(n))
		}
	}
	if sc.Tokens {
		b.WriteString(" tokens=true")
	}
	if sc.VIP {
		b.WriteString(" vip=true")
	}
	list("witness", sc.Witness)
	list("scsi", sc.SCSI)
	list("scsionly", sc.SCSIOnly)
	list("watchdog", sc.Watchdog)
	list("wdlevel", sc.WDLevel)
	list("nomagic", sc.NoMagic)
	list("nosysrq", sc.NoSysrq)
	list("slowstop", sc.SlowStop)
	list("stray", sc.Stray)
	list("blind", sc.Blind)
	if sc.Groups > 1 {
		fmt.Fprintf(&b, " groups=%d", sc.Groups)
	}
	if len(sc.Timings) > 0 {
		b.WriteString(" timings=")
		for i, p := range sc.Timings {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, p)
		}
	}
	b.WriteString(" faults=")
	for i, f := range sc.Faults {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(strings.ReplaceAll(f.String(), " ", "/"))
	}
	return b.String()
}

// Parse reads a schedule written by String.
func Parse(s string) (Schedule, error) {
	var sc Schedule
	for _, field := range strings.Fields(s) {
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return sc, fmt.Errorf("schedule: %q: want key=value", field)
		}
		var err error
		switch k {
		case "seed":
			sc.Seed, err = strconv.ParseUint(v, 0, 64)
		case "nodes":
			sc.Nodes, err = strconv.Atoi(v)
		case "profile":
			sc.Profile, err = strconv.Atoi(v)
		case "storage":
			sc.Storage, err = strconv.ParseBool(v)
		case "quiet":
			sc.Quiet, err = strconv.ParseBool(v)
		case "heal":
			sc.Heal, err = time.ParseDuration(v)
		case "ppm":
			for _, x := range splitList(v) {
				var p int64
				if p, err = strconv.ParseInt(x, 10, 64); err != nil {
					break
				}
				sc.PPM = append(sc.PPM, p)
			}
		case "down":
			for _, x := range splitList(v) {
				name, how, _ := strings.Cut(x, ":")
				var id int
				if id, err = parseNode(name); err != nil {
					break
				}
				sc.Down = append(sc.Down, Down{Node: id, Off: how == "off"})
			}
		case "calmdev":
			sc.CalmDev, err = parseNodes(v)
		case "tokens":
			sc.Tokens, err = strconv.ParseBool(v)
		case "vip":
			sc.VIP, err = strconv.ParseBool(v)
		case "witness":
			sc.Witness, err = parseNodes(v)
		case "scsi":
			sc.SCSI, err = parseNodes(v)
		case "scsionly":
			sc.SCSIOnly, err = parseNodes(v)
		case "watchdog":
			sc.Watchdog, err = parseNodes(v)
		case "wdlevel":
			sc.WDLevel, err = parseNodes(v)
		case "nomagic":
			sc.NoMagic, err = parseNodes(v)
		case "nosysrq":
			sc.NoSysrq, err = parseNodes(v)
		case "slowstop":
			sc.SlowStop, err = parseNodes(v)
		case "stray":
			sc.Stray, err = parseNodes(v)
		case "blind":
			sc.Blind, err = parseNodes(v)
		case "groups":
			sc.Groups, err = strconv.Atoi(v)
		case "timings":
			for _, x := range splitList(v) {
				var p int
				if p, err = strconv.Atoi(x); err != nil {
					break
				}
				if p < 0 || p >= len(profiles)+len(altProfiles) {
					err = fmt.Errorf("profile %d: want 0 to %d", p, len(profiles)+len(altProfiles)-1)
					break
				}
				sc.Timings = append(sc.Timings, p)
			}
		case "faults":
			for _, x := range strings.Split(v, ";") {
				if x == "" {
					continue
				}
				var f Fault
				if f, err = parseFault(strings.ReplaceAll(x, "/", " ")); err != nil {
					break
				}
				sc.Faults = append(sc.Faults, f)
			}
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			return sc, fmt.Errorf("schedule: %s: %w", k, err)
		}
	}
	switch {
	case sc.Nodes < 3 || sc.Nodes > 9:
		return sc, fmt.Errorf("schedule: nodes=%d: want 3 to 9", sc.Nodes)
	case len(sc.PPM) != sc.Nodes:
		return sc, fmt.Errorf("schedule: ppm: %d values for %d nodes", len(sc.PPM), sc.Nodes)
	case sc.Profile < 0 || sc.Profile >= len(profiles):
		return sc, fmt.Errorf("schedule: profile=%d: want 0 to %d", sc.Profile, len(profiles)-1)
	case sc.Groups < 0 || sc.Groups > maxGroups:
		return sc, fmt.Errorf("schedule: groups=%d: want 1 to %d", sc.Groups, maxGroups)
	}
	for _, p := range sc.PPM {
		if p < -Drift || p > Drift {
			return sc, fmt.Errorf("schedule: ppm %d outside ±%d", p, Drift)
		}
	}
	for _, f := range sc.Faults {
		if f.Node >= sc.Nodes || f.Kind >= numKinds {
			return sc, fmt.Errorf("schedule: fault %q: no such node or kind", f)
		}
	}
	for _, d := range sc.Down {
		if d.Node >= sc.Nodes {
			return sc, fmt.Errorf("schedule: down: no node %s", nodeName(d.Node))
		}
	}
	for _, ns := range [][]int{sc.CalmDev, sc.Witness, sc.SCSI, sc.SCSIOnly, sc.Watchdog, sc.WDLevel, sc.NoMagic, sc.NoSysrq, sc.SlowStop, sc.Stray, sc.Blind} {
		for _, n := range ns {
			if n >= sc.Nodes {
				return sc, fmt.Errorf("schedule: no node %s", nodeName(n))
			}
		}
	}
	if len(sc.Timings) != 0 && len(sc.Timings) != sc.Nodes {
		return sc, fmt.Errorf("schedule: timings: %d values for %d nodes", len(sc.Timings), sc.Nodes)
	}
	if len(sc.Down) > (sc.Nodes-1)/2 {
		return sc, fmt.Errorf("schedule: down: %d nodes of %d leave no majority", len(sc.Down), sc.Nodes)
	}
	return sc, nil
}

func splitList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

func parseNodes(v string) ([]int, error) {
	var ns []int
	for _, x := range splitList(v) {
		id, err := parseNode(x)
		if err != nil {
			return nil, err
		}
		ns = append(ns, id)
	}
	return ns, nil
}

func parseNode(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "n"))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("node %q", s)
	}
	return n - 1, nil
}

func parseFault(s string) (Fault, error) {
	var f Fault
	p := strings.Fields(s)
	if len(p) != 6 {
		return f, fmt.Errorf("fault %q: want 6 fields", s)
	}
	var err error
	if f.At, err = time.ParseDuration(p[0]); err != nil {
		return f, err
	}
	k := slices.Index(kindNames[:], p[1])
	if k < 0 {
		return f, fmt.Errorf("fault %q: unknown kind", s)
	}
	f.Kind = Kind(k)
	node, primary := strings.CutPrefix(p[2], "p:")
	f.Primary = primary
	if f.Node, err = parseNode(node); err != nil {
		return f, err
	}
	if f.Dur, err = time.ParseDuration(p[3]); err != nil {
		return f, err
	}
	if f.Arg, err = strconv.Atoi(p[4]); err != nil {
		return f, err
	}
	if f.Mask, err = strconv.ParseUint(p[5], 0, 64); err != nil {
		return f, err
	}
	return f, nil
}
