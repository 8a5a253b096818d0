package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/fenceapi"
)

// DefaultPluginDir is where named plugin agents are looked up first.
const DefaultPluginDir = "/usr/lib/fenced/agents"

// systemAgentDir holds the distribution's fence-agents (fence_* names only).
var systemAgentDir = "/usr/sbin"

func init() {
	agents.Register(Kind())
}

// Own parameters: everything else goes to the program.
var params = []agents.Param{
	{Name: "agent", Description: "FenceAgentAPI program: an absolute path, or a name found in plugin_dir or (fence_*) /usr/sbin", Type: "string", Required: true},
	{Name: "plugin_dir", Description: "Directory of plugin agents", Type: "string", Default: DefaultPluginDir},
	{Name: "agent_timeout", Description: "Limit for one run of the program when the caller sets none (seconds)", Type: "second", Default: "60"},
	{Name: "readback_timeout", Description: "How long to poll status after off or on until it reads back (seconds)", Type: "second", Default: "10"},
}

// Kind returns the "exec" agent kind.
func Kind() agents.Kind {
	return agents.Kind{
		Name:        "exec",
		Description: "Runs any FenceAgentAPI fence agent program (fence-agents, vendor plugins); its own parameters are checked against its metadata",
		Params:      params,
		OpenParams:  true,
		ParamsFor:   ParamsFor,
		New: func(p agents.Params, log *slog.Logger) (agents.Agent, error) {
			return New(p, log)
		},
	}
}

// ParamsFor returns the adapter's own parameters followed by those its
// program declares in its metadata (read as New reads it, cached), for the
// FenceAgentAPI front-end: `fenced agent exec` takes the program's
// parameters as its own.
func ParamsFor(p agents.Params) ([]agents.Param, error) {
	name := strings.TrimSpace(p["agent"])
	if name == "" {
		return nil, errors.New("parameter agent: required")
	}
	path, err := resolve(name, p.String("plugin_dir", DefaultPluginDir))
	if err != nil {
		return nil, fmt.Errorf("parameter agent: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := metadataOf(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", filepath.Base(path), err)
	}
	out := append([]agents.Param(nil), params...)
	for _, mp := range m.Parameters {
		if own[mp.Name] || mp.Name == "action" {
			continue
		}
		typ := mp.Content.Type
		if typ == "select" {
			typ = "string"
		}
		out = append(out, agents.Param{
			Name:        mp.Name,
			Description: mp.Description(),
			Type:        typ,
			Default:     mp.Content.Default,
			Required:    mp.IsRequired() && !mp.IsDeprecated(),
			// A NAME_script names a command, not a secret (as the
			// built-in agents' password_script).
			Secret: secretName.MatchString(mp.Name) && !strings.HasSuffix(mp.Name, "_script"),
		})
	}
	return out, nil
}

// Agent runs one external program for one target. It is safe for
// concurrent use; each operation is one or more runs of the program.
type Agent struct {
	path     string
	name     string // base name, for errors and logs
	meta     *fenceapi.Metadata
	lines    []param // passed on stdin, in a stable order
	timeout  time.Duration
	readback time.Duration
	log      *slog.Logger

	mu         sync.Mutex
	lastStderr string
}

// param is one name=value line; fromFile means value is a file to read
// at run time (NAME_file), so a rotated secret is picked up.
type param struct {
	name, value string
	fromFile    bool
	secret      bool
}

// secretName matches parameter names whose values are secrets: they are
// scrubbed from anything the program prints.
var secretName = regexp.MustCompile(`(?i)passw|community|secret|token|credential|private|key|(^|_)kg$`)

var agentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)

// New resolves the program, reads its metadata and checks p against it.
// It runs the program once for "-o metadata" (cached per file) and never
// touches the network.
func New(p agents.Params, log *slog.Logger) (*Agent, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	name := strings.TrimSpace(p["agent"])
	if name == "" {
		return nil, errors.New("exec: parameter agent: required")
	}
	path, err := resolve(name, p.String("plugin_dir", DefaultPluginDir))
	if err != nil {
		return nil, fmt.Errorf("exec: parameter agent: %w", err)
	}
	a := &Agent{path: path, name: filepath.Base(path), log: log.With("agent", filepath.Base(path))}
	if a.timeout, err = p.Seconds("agent_timeout", 60*time.Second); err != nil {
		errs = append(errs, err)
	} else if a.timeout <= 0 {
		errs = append(errs, errors.New("parameter agent_timeout: must be > 0"))
	}
	if a.readback, err = p.Seconds("readback_timeout", 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	mctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if a.meta, err = metadataOf(mctx, path); err != nil {
		return nil, fmt.Errorf("exec %s: %w", a.name, err)
	}
	a.lines, errs = checkParams(a.name, a.meta, p, errs)
	if len(errs) > 0 {
		return nil, fmt.Errorf("exec %s: %w", a.name, errors.Join(errs...))
	}
	return a, nil
}

func resolve(name, pluginDir string) (string, error) {
	var candidates []string
	if strings.ContainsRune(name, '/') {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("%q: a path must be absolute", name)
		}
		candidates = []string{filepath.Clean(name)}
	} else {
		if !agentName.MatchString(name) {
			return "", fmt.Errorf("%q is not a valid agent name", name)
		}
		if pluginDir != "" {
			candidates = append(candidates, filepath.Join(pluginDir, name))
		}
		if strings.HasPrefix(name, "fence_") {
			candidates = append(candidates, filepath.Join(systemAgentDir, name))
		}
	}
	for _, c := range candidates {
		fi, err := os.Stat(c)
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s is not a regular file", c)
		}
		if fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable", c)
		}
		return c, nil
	}
	return "", fmt.Errorf("%q not found (looked in %s)", name, strings.Join(candidates, ", "))
}

// own lists the parameters the adapter keeps for itself. nodename is what
// Pacemaker passes every agent; action is set per run.
var own = map[string]bool{"agent": true, "plugin_dir": true, "agent_timeout": true, "readback_timeout": true, "action": true}

func checkParams(agent string, m *fenceapi.Metadata, p agents.Params, errs []error) ([]param, []error) {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	var lines []param
	given := map[string]bool{}
	for _, n := range names {
		v := p[n]
		if own[n] {
			continue
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			// A line break would let a value inject other parameters.
			errs = append(errs, fmt.Errorf("parameter %s: value contains a line break or NUL", n))
			continue
		}
		if n == "nodename" {
			lines = append(lines, param{name: n, value: v})
			given[n] = true
			continue
		}
		if n == "method" && strings.EqualFold(strings.TrimSpace(v), "cycle") {
			// fenced never runs the program's reboot: it fences with off,
			// read back as off, then on. A power cycle's off is never seen
			// (fence_ipmilan calls a cycle done when the BMC acknowledges
			// the command), so taking the parameter would be a promise we
			// do not keep.
			errs = append(errs, fmt.Errorf("parameter method: cycle is refused: fenced reboots with off, confirmed by reading the status back, then on, and never runs %s's reboot, whose power cycle is not observed to turn the node off (leave method out or set onoff)", agent))
			continue
		}
		if _, ok := m.Parameter(n); ok {
			lines = append(lines, param{name: n, value: v, secret: secretName.MatchString(n)})
			given[n] = true
			continue
		}
		if n == "plug" || n == "port" {
			// The topology may give a plug to a device whose program
			// has none (it drives one machine): nothing to pass.
			continue
		}
		if base, ok := strings.CutSuffix(n, "_file"); ok {
			if _, known := m.Parameter(base); known {
				lines = append(lines, param{name: base, value: v, fromFile: true, secret: true})
				given[base] = true
				if _, err := os.Stat(v); err != nil {
					errs = append(errs, fmt.Errorf("parameter %s: %w", n, err))
				}
				continue
			}
		}
		errs = append(errs, fmt.Errorf("parameter %s: unknown to %s (see %s -o metadata)", n, agent, agent))
	}
	for _, mp := range m.Parameters {
		if !mp.IsRequired() || mp.IsDeprecated() || mp.Name == "action" || given[mp.Name] {
			continue
		}
		// A deprecated name this one replaces (ipaddr for ip, port for
		// plug) satisfies it, and so does a NAME_script the agent runs.
		if (mp.Obsoletes != "" && given[mp.Obsoletes]) || given[mp.Name+"_script"] {
			continue
		}
		satisfied := false
		for _, other := range m.Parameters {
			if other.Obsoletes == mp.Name && given[other.Name] {
				satisfied = true
			}
		}
		if !satisfied {
			errs = append(errs, fmt.Errorf("parameter %s: required by %s", mp.Name, agent))
		}
	}
	return lines, errs
}

// metadata cache: one entry per program file, invalidated when it changes.
var (
	metaMu    sync.Mutex
	metaCache = map[string]metaEntry{}
)

type metaEntry struct {
	mtime time.Time
	size  int64
	meta  *fenceapi.Metadata
}

func metadataOf(ctx context.Context, path string) (*fenceapi.Metadata, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	metaMu.Lock()
	e, ok := metaCache[path]
	metaMu.Unlock()
	if ok && e.mtime.Equal(fi.ModTime()) && e.size == fi.Size() {
		return e.meta, nil
	}
	res, err := runProgram(ctx, path, []string{"-o", "metadata"}, nil)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if res.timedOut {
		return nil, fmt.Errorf("metadata: killed with its process group after %s", res.elapsed.Round(time.Millisecond))
	}
	if res.exit != 0 {
		return nil, fmt.Errorf("metadata: exit status %d: %s", res.exit, summary(res.stderr))
	}
	m, err := fenceapi.ParseMetadata(bytes.NewReader(res.stdout))
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", path, err)
	}
	metaMu.Lock()
	metaCache[path] = metaEntry{mtime: fi.ModTime(), size: fi.Size(), meta: m}
	metaMu.Unlock()
	return m, nil
}

// runResult is what one run of the program left.
type runResult struct {
	exit     int // -1 when killed by a signal
	signaled bool
	timedOut bool
	stdout   []byte
	stderr   []byte
	elapsed  time.Duration
}

// limitedBuffer keeps the first max bytes written and drops the rest, so a
// runaway program cannot fill memory.
type limitedBuffer struct {
	buf bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		if len(p) > room {
			l.buf.Write(p[:room])
		} else {
			l.buf.Write(p)
		}
	}
	return len(p), nil
}

// runProgram runs path in its own process group. When ctx ends, the whole
// group is killed: agents often fork helpers (ipmitool, snmpget) that would
// otherwise outlive them.
func runProgram(ctx context.Context, path string, args []string, stdin []byte) (*runResult, error) {
	cmd := osexec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// A grandchild that left the group could hold the pipes open forever.
	cmd.WaitDelay = 2 * time.Second
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Dir = "/"
	env := os.Environ()
	if os.Getenv("PYTHONWARNINGS") == "" {
		// fence-agents print a harmless DeprecationWarning on every run.
		env = append(env, "PYTHONWARNINGS=ignore::DeprecationWarning")
	}
	cmd.Env = env
	stdout, stderr := &limitedBuffer{max: 1 << 20}, &limitedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	pgid := cmd.Process.Pid
	err := cmd.Wait()
	// Whatever the program left running in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	res := &runResult{stdout: stdout.buf.Bytes(), stderr: stderr.buf.Bytes(), elapsed: time.Since(start)}
	res.exit = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.signaled = true
	}
	if ctx.Err() != nil {
		res.timedOut = true
		return res, nil
	}
	var ee *osexec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, osexec.ErrWaitDelay) {
		return res, fmt.Errorf("wait: %w", err)
	}
	return res, nil
}

// summary condenses output for an error message: its last three non-empty
// lines.
func summary(b []byte) string {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return strings.Join(lines, " | ")
}
