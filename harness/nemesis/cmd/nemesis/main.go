// Command nemesis runs the fault-injection harness against real fenced
// processes (see package harness/nemesis), and holds the small programs the
// harness runs inside its simulated machines: machine, init, writer and
// escape.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fenced/fenced/harness/nemesis"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

const usage = `usage:
  nemesis run [--nodes 3|5] [--faults N] [--seed S] [--dir DIR] [--timing ci|default]
              [--profile fence|tokens] [--kinds a,b] [--fenced BIN] [--fencectl BIN] [--escape]
  nemesis machine --spec FILE     (run by a BMC: one power-on of a node)
  nemesis init --spec FILE        (PID 1 of a node's machine)
  nemesis writer --node N --epoch E --file F --blind B [--interval D] [--store URL]
  nemesis escape --socket S --node N --epoch E --file F --blind B [--interval D]

Exit status of run: 0 when every check passed, 1 on a violation or a
cluster that did not recover, 2 when the harness could not run.`

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("nemesis "+args[0], flag.ContinueOnError)
	spec := fs.String("spec", "", "machine spec file")
	node := fs.String("node", "", "node name")
	epoch := fs.Uint64("epoch", 0, "epoch")
	file := fs.String("file", "", "file on the shared filesystem")
	blind := fs.String("blind", "", "epoch-blind log")
	interval := fs.Duration("interval", 20*time.Millisecond, "time between writes")
	socket := fs.String("socket", "", "escape socket")
	nodes := fs.Int("nodes", 3, "cluster size: 3 or 5")
	faults := fs.Int("faults", 100, "faults to inject")
	seed := fs.Int64("seed", 0, "seed (0: from the clock)")
	dir := fs.String("dir", "", "output directory (default: a new one under the temp dir)")
	timing := fs.String("timing", "ci", "ci (lease 1.5s) or default (the daemon's defaults, lease 3s)")
	kinds := fs.String("kinds", "", "comma-separated fault kinds (default: all); one of "+strings.Join(nemesis.Kinds(), ", "))
	fenced := fs.String("fenced", "bin/fenced", "fenced binary")
	lab := fs.String("lab", "", "fenced-lab binary (default: beside --fenced)")
	fencectl := fs.String("fencectl", "bin/fencectl", "fencectl binary")
	escape := fs.Bool("escape", false, "negative control: the writer escapes its machine")
	store := fs.String("store", "", "writer: the token-checking store (tokens profile)")
	profile := fs.String("profile", "fence", "fence (a shared ext4, every node fenced through its BMC) or tokens (storage that checks tokens, one node without a fence topology)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "machine":
		stop() // the machine handles SIGTERM itself: it is the power-off
		err = nemesis.RunMachine(*spec)
	case "init":
		stop()
		err = nemesis.RunInit(*spec)
	case "writer":
		err = nemesis.RunWriter(ctx, nemesis.WriterConfig{Node: *node, Epoch: *epoch, File: *file, Blind: *blind, Interval: *interval, Store: *store})
	case "escape":
		err = nemesis.RequestEscape(*socket, nemesis.EscapeRequest{Node: *node, Epoch: *epoch, File: *file, Blind: *blind, Interval: *interval})
	case "run":
		if *profile != "fence" && *profile != "tokens" {
			fmt.Fprintf(os.Stderr, "nemesis: --profile %q: want fence or tokens\n", *profile)
			return 2
		}
		return runNemesis(ctx, nemesis.Options{Nodes: *nodes, Faults: *faults, Seed: *seed, Dir: *dir, Fenced: *fenced, Lab: *lab,
			Fencectl: *fencectl, Escape: *escape, Tokens: *profile == "tokens", Progress: os.Stdout}, *timing, *kinds)
	default:
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nemesis %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func runNemesis(ctx context.Context, o nemesis.Options, timing, kinds string) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "nemesis: needs root (network, mount, PID and time namespaces, loop devices)")
		return 2
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	switch timing {
	case "ci":
		o.Timing = nemesis.CITiming
	case "default":
		o.Timing = nemesis.DefaultTiming()
	default:
		fmt.Fprintf(os.Stderr, "nemesis: --timing %q: want ci or default\n", timing)
		return 2
	}
	if kinds != "" {
		o.Kinds = strings.Split(kinds, ",")
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nemesis:", err)
		return 2
	}
	o.Nemesis = self
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", fmt.Sprintf("nemesis-%d-", o.Seed)); err != nil {
			fmt.Fprintln(os.Stderr, "nemesis:", err)
			return 2
		}
	} else if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "nemesis:", err)
		return 2
	}
	o.Dir, _ = filepath.Abs(o.Dir)
	fmt.Printf("nemesis: seed %d (replay with SEED=%d)\n", o.Seed, o.Seed)
	res, err := nemesis.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nemesis:", err)
		return 2
	}
	fmt.Print(res.Summary)
	if !res.OK() {
		return 1
	}
	return 0
}
