package resource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Exit codes of the OCF resource agent API.
const (
	OCFSuccess          = 0 // action succeeded (monitor: running)
	OCFErrGeneric       = 1 // generic error (monitor: failed, maybe running)
	OCFErrArgs          = 2 // invalid or excess arguments
	OCFErrUnimplemented = 3 // action not implemented
	OCFErrPerm          = 4 // insufficient privileges
	OCFErrInstalled     = 5 // a program the agent needs is not installed
	OCFErrConfigured    = 6 // the resource is not configured (correctly)
	OCFNotRunning       = 7 // monitor: cleanly stopped
)

var exitNames = map[int]string{
	OCFSuccess: "success", OCFErrGeneric: "generic error", OCFErrArgs: "invalid argument",
	OCFErrUnimplemented: "unimplemented feature", OCFErrPerm: "insufficient privileges",
	OCFErrInstalled: "not installed", OCFErrConfigured: "not configured", OCFNotRunning: "not running",
}

// ExitName is the OCF meaning of an exit code ("not running").
func ExitName(code int) string {
	if n, ok := exitNames[code]; ok {
		return n
	}
	return "unknown exit code"
}

// OCF API version announced to agents (OCF_RA_VERSION_MAJOR/MINOR).
const ocfMajor, ocfMinor = "1", "1"

// ExitError is an agent that exited with a code other than the one the
// caller wanted.
type ExitError struct {
	Agent  string // PROVIDER:TYPE
	Action string
	Code   int
	// Reason is what the agent gave with ocf_exit_reason, if anything.
	Reason string
	// Output is the end of what it printed (secrets scrubbed).
	Output string
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s %s: exit %d (%s)", e.Agent, e.Action, e.Code, ExitName(e.Code))
	switch {
	case e.Reason != "":
		msg += ": " + e.Reason
	case e.Output != "":
		msg += "; output: " + e.Output
	}
	return msg
}

// ErrTimeout is wrapped by the error of an action killed at its deadline.
var ErrTimeout = errors.New("timed out")

// ocfAgent runs one configured OCF resource instance.
type ocfAgent struct {
	res      string // resource (instance) name
	agent    string // PROVIDER:TYPE
	provider string
	typ      string
	path     string
	root     string
	node     string
	params   map[string]string
	secrets  []string // values scrubbed from output
	meta     *Metadata
	log      *slog.Logger
	// outputLimit bounds the output kept in errors and logs.
	outputLimit int
}

// agentPath is where an agent lives under root.
func agentPath(root, provider, typ string) string {
	return filepath.Join(root, "resource.d", provider, typ)
}

// secretParam matches parameter names whose values are kept out of logs
// and errors (a database agent's password, an API token).
var secretParam = regexp.MustCompile(`(?i)passw|secret|token|credential|private|(^|_)key$|auth`)

// token is what every action of one tenure is told.
type token struct {
	epoch    uint64
	previous string
}

// result is one finished run of an agent action.
type result struct {
	code   int
	output string // tail, scrubbed
	reason string // last ocf-exit-reason
	took   time.Duration
}

// run runs one action with interval as the monitor's interval (0 for a
// probe and every other action). The error is non-nil only when the agent
// could not be run or was killed at ctx's deadline; an exit code is the
// caller's to judge.
func (a *ocfAgent) run(ctx context.Context, action string, interval time.Duration, tok token) (result, error) {
	out, err := os.CreateTemp("", "fenced-ocf-")
	if err != nil {
		return result{}, fmt.Errorf("%s %s: output file: %w", a.agent, action, err)
	}
	os.Remove(out.Name())
	defer out.Close()

	cmd := exec.CommandContext(ctx, a.path, action)
	cmd.Env = a.env(ctx, action, interval, tok)
	// A file, not a pipe: agents leave helpers running in the background
	// (IPaddr2's send_arp), which must not hold the action open.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = "/" // never keep a mountpoint busy through our cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// At the deadline the agent's whole process group goes, so nothing it
	// started survives an action that did not finish.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	start := time.Now()
	runErr := cmd.Run()
	res := result{took: time.Since(start)}
	res.output, res.reason = a.output(out)
	if ctx.Err() != nil {
		return res, fmt.Errorf("%s %s: %w after %v (agent killed with its process group): %v", a.agent, action, ErrTimeout, res.took.Round(time.Millisecond), context.Cause(ctx))
	}
	var ee *exec.ExitError
	switch {
	case runErr == nil:
		res.code = 0
	case errors.As(runErr, &ee) && ee.Exited():
		res.code = ee.ExitCode()
	default:
		return res, fmt.Errorf("%s %s: %w", a.agent, action, runErr)
	}
	return res, nil
}

// env is the agent's environment: the daemon's, without any OCF_
// variables of its own, plus the OCF API's variables, the instance
// parameters and fenced's token.
func (a *ocfAgent) env(ctx context.Context, action string, interval time.Duration, tok token) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OCF_") && !strings.HasPrefix(kv, "FENCED_") {
			env = append(env, kv)
		}
	}
	timeout := DefaultTimeout
	if dl, ok := ctx.Deadline(); ok {
		// Agents read the timeout in whole seconds (timeout/1000) to size
		// their retries: round up, so that 1.8s left does not read as 1s
		// (Filesystem's stop would not even try to unmount). The action is
		// still killed at the real deadline.
		timeout = max(time.Until(dl), time.Millisecond)
		timeout = (timeout + time.Second - 1).Truncate(time.Second)
	}
	env = append(env,
		"OCF_ROOT="+a.root,
		"OCF_RA_VERSION_MAJOR="+ocfMajor,
		"OCF_RA_VERSION_MINOR="+ocfMinor,
		"OCF_RESOURCE_INSTANCE="+a.res,
		"OCF_RESOURCE_TYPE="+a.typ,
		"OCF_RESOURCE_PROVIDER="+a.provider,
		"OCF_CHECK_LEVEL=0",
		// What Pacemaker tells every action; agents size their own
		// waits by the timeout and detect a probe by interval 0.
		"OCF_RESKEY_CRM_meta_timeout="+strconv.FormatInt(timeout.Milliseconds(), 10),
		"OCF_RESKEY_CRM_meta_interval="+strconv.FormatInt(interval.Milliseconds(), 10),
		"OCF_RESKEY_CRM_meta_name="+action,
		"OCF_RESKEY_CRM_meta_on_node="+a.node,
		"FENCED_ACTION="+action,
		"FENCED_EPOCH="+strconv.FormatUint(tok.epoch, 10),
		"FENCED_NODE="+a.node,
		"FENCED_PREVIOUS_HOLDER="+tok.previous,
	)
	for _, k := range sortedKeys(a.params) {
		env = append(env, "OCF_RESKEY_"+k+"="+a.params[k])
	}
	return env
}

const exitReasonPrefix = "ocf-exit-reason:"

// output returns the tail of what the agent printed, with secrets
// scrubbed, and its last exit reason.
func (a *ocfAgent) output(f *os.File) (tail, reason string) {
	st, err := f.Stat()
	if err != nil {
		return "", ""
	}
	// Exit reasons are short and come last; read a little more than the
	// tail so one just before the cut is still found.
	limit := int64(a.outputLimit)
	off := max(st.Size()-2*limit, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return "", ""
	}
	s := strings.ToValidUTF8(string(b), "?")
	for _, sec := range a.secrets {
		s = strings.ReplaceAll(s, sec, "***")
	}
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, exitReasonPrefix); i >= 0 {
			reason = strings.TrimSpace(line[i+len(exitReasonPrefix):])
		}
	}
	s = strings.TrimSpace(s)
	if int64(len(s)) > limit {
		s = "..." + s[len(s)-int(limit):]
	}
	return s, reason
}

// call runs action and turns any exit code but want into an *ExitError.
func (a *ocfAgent) call(ctx context.Context, action string, interval time.Duration, tok token, want ...int) (result, error) {
	res, err := a.run(ctx, action, interval, tok)
	log := a.log.With("action", action, "epoch", tok.epoch, "took", res.took.Round(time.Microsecond))
	if err != nil {
		log.Warn("resource agent failed", "err", err, "output", res.output)
		return res, err
	}
	for _, w := range want {
		if res.code == w {
			log.Debug("resource agent done", "rc", res.code, "output", res.output)
			return res, nil
		}
	}
	e := &ExitError{Agent: a.agent, Action: action, Code: res.code, Reason: res.reason, Output: res.output}
	if action != "monitor" || res.code != OCFNotRunning {
		log.Warn("resource agent failed", "rc", res.code, "meaning", ExitName(res.code), "reason", res.reason, "output", res.output)
	}
	return res, e
}

func (a *ocfAgent) start(ctx context.Context, tok token) error {
	_, err := a.call(ctx, "start", 0, tok, OCFSuccess)
	return err
}

func (a *ocfAgent) stop(ctx context.Context, tok token) error {
	// A stop that fails or times out is a failed stop: never "assume
	// stopped" (the caller self-fences).
	_, err := a.call(ctx, "stop", 0, tok, OCFSuccess)
	return err
}

func (a *ocfAgent) check(ctx context.Context, tok token, interval time.Duration) (bool, error) {
	res, err := a.call(ctx, "monitor", interval, tok, OCFSuccess, OCFNotRunning)
	if err != nil {
		var ee *ExitError
		// A probe that finds the agent's programs missing means the
		// resource cannot be running here (Pacemaker reads it so too).
		if interval == 0 && errors.As(err, &ee) && ee.Code == OCFErrInstalled {
			return false, nil
		}
		return false, err
	}
	if res.code == OCFNotRunning && interval > 0 {
		// On the primary, not running is a failure; keep the agent's reason.
		return false, &ExitError{Agent: a.agent, Action: "monitor", Code: res.code, Reason: res.reason, Output: res.output}
	}
	return res.code == OCFSuccess, nil
}

func (a *ocfAgent) validate(ctx context.Context) error {
	if _, ok := a.meta.Action("validate-all"); !ok {
		return nil
	}
	_, err := a.call(ctx, "validate-all", 0, token{}, OCFSuccess, OCFErrUnimplemented)
	return err
}

// metadata cache: one entry per agent file, invalidated when it changes.
var (
	metaMu    sync.Mutex
	metaCache = map[string]metaEntry{}
)

type metaEntry struct {
	mtime time.Time
	size  int64
	meta  *Metadata
}

// readMetadata runs the agent's meta-data action and parses it.
func readMetadata(ctx context.Context, root, provider, typ string) (string, *Metadata, error) {
	path := agentPath(root, provider, typ)
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return path, nil, fmt.Errorf("no agent %s:%s: %s does not exist (installed agents: %s)", provider, typ, path, installed(root, provider))
		}
		return path, nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return path, nil, fmt.Errorf("%s is not an executable file", path)
	}
	metaMu.Lock()
	e, ok := metaCache[path]
	metaMu.Unlock()
	if ok && e.mtime.Equal(fi.ModTime()) && e.size == fi.Size() {
		return path, e.meta, nil
	}
	a := &ocfAgent{res: "meta-data", agent: provider + ":" + typ, provider: provider, typ: typ, path: path, root: root,
		log: slog.New(slog.DiscardHandler), outputLimit: 1 << 20}
	out, err := os.CreateTemp("", "fenced-ocf-meta-")
	if err != nil {
		return path, nil, err
	}
	os.Remove(out.Name())
	defer out.Close()
	cmd := exec.CommandContext(ctx, path, "meta-data")
	cmd.Env = a.env(ctx, "meta-data", 0, token{})
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = out, &stderr
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[len(msg)-500:]
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
		}
		return path, nil, fmt.Errorf("%s meta-data: %w %s", path, err, msg)
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return path, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(out, 4<<20))
	if err != nil {
		return path, nil, err
	}
	m, err := parseMetadataBytes(b)
	if err != nil {
		return path, nil, fmt.Errorf("%s: %w", path, err)
	}
	metaMu.Lock()
	metaCache[path] = metaEntry{mtime: fi.ModTime(), size: fi.Size(), meta: m}
	metaMu.Unlock()
	return path, m, nil
}

// installed lists a few agents of provider under root, for a helpful
// "no such agent" message.
func installed(root, provider string) string {
	ents, err := os.ReadDir(filepath.Join(root, "resource.d", provider))
	if err != nil {
		provs, _ := os.ReadDir(filepath.Join(root, "resource.d"))
		var names []string
		for _, p := range provs {
			names = append(names, p.Name())
		}
		if len(names) == 0 {
			return fmt.Sprintf("none under %s", filepath.Join(root, "resource.d"))
		}
		return fmt.Sprintf("no provider %q; providers: %s", provider, strings.Join(names, ", "))
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) > 12 {
		names = append(names[:12], fmt.Sprintf("… %d more", len(names)-12))
	}
	return strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
