package nemesis

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hookPaths are the storage hooks the nodes run.
type hookPaths struct{ start, stop, monitor string }

// hookConfig is what the hooks need to know; all paths absolute.
type hookConfig struct {
	Dir      string // where the scripts go
	NodesDir string // NodesDir/NODE/run is the machine's /run; NodesDir/NODE holds the writer logs
	Nemesis  string // the nemesis binary
	Lab      string // the fenced-lab binary (token-checking writer)
	Blind    string // the epoch-blind log
	StoreURL string // the token-checking store, as the nodes reach it
	Interval string // blind writer interval
	// Escape makes the start hook ask the harness to run the blind writer
	// outside the machine (the negative control).
	Escape string // the escape socket, or ""
	// Shared, in the tokens profile, is the file all writers append to in
	// place of one on the shared ext4: each record goes there only once the
	// token store accepted it.
	Shared string
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeHooks writes the start, stop and monitor hooks. Start replaces any
// writer left from an earlier tenure on this machine, then starts the
// blind writer (file on the mount + outside log) and the token-checking
// writer in the background, their PIDs in the machine's /run. Stop ends
// both (TERM, then KILL) and returns only when they are gone, so the
// unmount that follows finds the filesystem free. Monitor fails once either
// has exited.
func writeHooks(c hookConfig) (hookPaths, error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return hookPaths{}, err
	}
	h := hookPaths{filepath.Join(c.Dir, "start"), filepath.Join(c.Dir, "stop"), filepath.Join(c.Dir, "monitor")}
	common := `set -eu
: "${FENCED_NODE:?FENCED_NODE not set}"
node_dir=` + shq(c.NodesDir) + `/"$FENCED_NODE"
run="$node_dir/run"
# alive PID: running, not a zombie, and one of our writers (PIDs are reused).
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null && return 1
	grep -qa writer "/proc/$1/cmdline" 2>/dev/null
}
`
	file, store, needMount := `"$FENCED_MOUNTPOINT/records"`, "", `: "${FENCED_MOUNTPOINT:?FENCED_MOUNTPOINT not set}"`
	if c.Shared != "" {
		file, store, needMount = shq(c.Shared), " --store "+shq(c.StoreURL), ""
	}
	blind := shq(c.Nemesis) + ` writer --node "$FENCED_NODE" --epoch "$FENCED_EPOCH" --file ` + file + ` --blind ` +
		shq(c.Blind) + ` --interval ` + c.Interval + store + ` >>"$node_dir/writer.log" 2>&1 </dev/null &
echo $! >"$run/blind.pid"`
	if c.Escape != "" {
		blind = `# Negative control: the writer runs outside this machine.
` + shq(c.Nemesis) + ` escape --socket ` + shq(c.Escape) + ` --node "$FENCED_NODE" --epoch "$FENCED_EPOCH" --file "$FENCED_MOUNTPOINT/records" --blind ` +
			shq(c.Blind) + ` --interval ` + c.Interval
	}
	scripts := map[string]string{
		h.stop: common + `for w in blind token; do
	f="$run/$w.pid"
	[ -f "$f" ] || continue
	pid=$(cat "$f")
	if alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		i=0
		while alive "$pid"; do
			i=$((i+1))
			if [ "$i" -eq 40 ]; then kill -KILL "$pid" 2>/dev/null || true; fi
			sleep 0.02
		done
	fi
	rm -f "$f"
done
`,
		h.start: common + `: "${FENCED_EPOCH:?FENCED_EPOCH not set}"
` + needMount + `
` + shq(h.stop) + `
` + blind + `
` + shq(c.Lab) + ` sim writer --url ` + shq(c.StoreURL) + ` --interval 50ms >>"$node_dir/token-writer.log" 2>&1 </dev/null &
echo $! >"$run/token.pid"
`,
		h.monitor: common + `for w in blind token; do
	f="$run/$w.pid"
	[ -f "$f" ] || { [ "$w" = blind ] && [ -n "` + c.Escape + `" ] && continue; echo "$w writer not running"; exit 1; }
	pid=$(cat "$f")
	alive "$pid" || { echo "$w writer $pid has exited"; tail -n 2 "$node_dir/$w-writer.log" "$node_dir/writer.log" 2>/dev/null || true; exit 1; }
done
`,
	}
	for path, body := range scripts {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n# Written by the nemesis harness.\n"+body), 0o755); err != nil {
			return hookPaths{}, fmt.Errorf("hooks: %w", err)
		}
	}
	return h, nil
}
