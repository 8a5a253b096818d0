// Package agents defines the contract every fence agent implements and the
// registry through which agents are found by name.
//
// An agent drives one fencing device (a BMC, a PDU, a fabric switch, an
// external FenceAgentAPI program) for one target (the plug: an outlet, a
// system id, a port list). The stonith engine owns deadlines and retries;
// agents own the device protocol and the read-back of the state they set.
package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// State is a power or fabric state as read back from a device.
type State int

const (
	// StateUnknown means the device answered but the state could not be
	// interpreted, or the device was not asked.
	StateUnknown State = iota
	// StateOn means the target is powered (or its fabric ports are zoned in).
	StateOn
	// StateOff means the target is powered off (or cut out of the fabric).
	StateOff
)

func (s State) String() string {
	switch s {
	case StateOn:
		return "on"
	case StateOff:
		return "off"
	default:
		return "unknown"
	}
}

// Agent controls one target through one device.
//
// Contract:
//   - Implementations are safe for concurrent use, but the stonith engine
//     never runs two operations on the same target at once.
//   - Every method may block on the network; it must return when ctx is done.
//   - Off returns nil only after the device has been read back as off: a
//     command that was merely accepted is not success. On and Reboot likewise
//     confirm by read-back (Reboot is off, confirmed off, then on).
//   - Errors are classified with Failed or Unknown (see Error): "failed"
//     means the device refused, or was read back in the wrong state, so the
//     target's state did not change because of us; "outcome unknown" means a
//     command may have been sent and we could not learn what happened (a
//     timeout after sending off, a dropped connection). Callers must treat
//     unknown as not fenced.
//   - Secrets (passwords, communities, keys) never appear in errors or logs.
type Agent interface {
	Off(ctx context.Context) error
	On(ctx context.Context) error
	Reboot(ctx context.Context) error
	Status(ctx context.Context) (State, error)
}

// Lister is implemented by agents that can enumerate their device's ports
// (outlets, systems, plugs): the FenceAgentAPI "list" action.
type Lister interface {
	List(ctx context.Context) ([]Port, error)
}

// Monitor is implemented by agents that can check the device is reachable and
// accepts our credentials without touching the target: "monitor".
type Monitor interface {
	Monitor(ctx context.Context) error
}

// StartUnfencer is implemented by agents that may need their "on" run by
// the fenced node itself when it starts, before it may use the storage:
// SCSI-3 persistent reservations (fence_scsi, fence_mpath) register the
// node's own key from the node. FenceAgentAPI metadata says so with
// on_target="1" automatic="1" on the "on" action.
type StartUnfencer interface {
	UnfenceAtStart() bool
}

// Closer is implemented by agents that hold connections between calls.
type Closer interface {
	Close() error
}

// Commander is implemented by agents whose power command can be sent on
// its own, without the agent's confirming poll. The stonith engine then
// sends the command and polls Status itself until the state reads back, so
// a fence costs one command plus the read-back the engine makes anyway
// (Off followed by the engine's Status reads the state at least twice).
type Commander interface {
	// Command sends the command that brings the target to want (StateOff
	// or StateOn) and returns once the device accepted it, without reading
	// the state: nil means accepted, never done. window is how long the
	// state may take to follow (the agent's power_timeout). Errors are
	// classified as Off's: failed if the device refused, unknown if it may
	// have carried the command out.
	Command(ctx context.Context, want State) (window time.Duration, err error)
}

// Keeper is implemented by agents that can hold a logged-in session to
// their device between operations, so that an operation is only its
// commands (an IPMI lanplus login is five round trips; a Redfish one a TLS
// handshake, the service root and a POST). The holder of a long-lived
// agent (the device's health monitor) calls Check and KeepAlive; the
// agent's operations use the session it holds, and replace it with a new
// one if it does not answer: a held session is never trusted for a result.
//
// An agent holds at most one session. Operations never wait behind a
// KeepAlive: they cancel it and take the session.
type Keeper interface {
	// Check verifies the device as a fence would need it: it logs in anew
	// (so that a changed password is noticed while the held session still
	// works) and asks what Monitor asks. With keep set, the new session is
	// then held in place of the previous one, which is logged out;
	// without, it is logged out, and so is any session held.
	Check(ctx context.Context, keep bool) error
	// KeepAlive makes one cheap request on the held session, so that the
	// device does not expire it, and drops the session if it does not
	// answer. It returns nil when no session is held, when an operation is
	// using it, and when an operation cancels it.
	KeepAlive(ctx context.Context) error
	// KeepAliveInterval is how often a held session needs KeepAlive.
	KeepAliveInterval() time.Duration
	// Holds reports whether a session is held.
	Holds() bool
	// Drop logs out the held session, if any.
	Drop()
}

// RoundTripper is implemented by agents that measure how long their device
// takes to answer a request; the engine sizes its expectations with it.
type RoundTripper interface {
	// RoundTrip returns the smoothed round-trip time of the device's
	// answers and the per-request timeout derived from it; ok is false
	// before the device has answered.
	RoundTrip() (rtt, timeout time.Duration, ok bool)
}

// AnswerReporter is implemented by agents that call NoteAnswer whenever
// their device answers a request of an operation (an error reply counts:
// the device is there), so the engine can tell a slow device from one that
// does not answer at all.
type AnswerReporter interface {
	ReportsAnswers() bool
}

type answerKey struct{}

// WithAnswerHook returns a context whose operations call fn (concurrently
// safe, possibly often) each time their device answers.
func WithAnswerHook(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, answerKey{}, fn)
}

// NoteAnswer tells the hook of ctx, if any, that the device answered.
func NoteAnswer(ctx context.Context) {
	if fn, ok := ctx.Value(answerKey{}).(func()); ok && fn != nil {
		fn()
	}
}

// Steps of one try of a device action, for the status of a running fence
// (NoteStep): logging in, sending the command, reading the state back.
const (
	StepSession  = "session"
	StepCommand  = "command"
	StepReadBack = "read-back"
)

type stepKey struct{}

// WithStepHook returns a context whose operations call fn (concurrently
// safe) when they move to another step of a try (StepSession, ...).
func WithStepHook(ctx context.Context, fn func(step string)) context.Context {
	return context.WithValue(ctx, stepKey{}, fn)
}

// NoteStep tells the hook of ctx, if any, that the operation is now at
// step. Agents that log in call it with StepSession before and StepCommand
// after; the engine notes the command and the read-back itself.
func NoteStep(ctx context.Context, step string) {
	if fn, ok := ctx.Value(stepKey{}).(func(string)); ok && fn != nil {
		fn(step)
	}
}

// Port is one entry of a device's port list.
type Port struct {
	ID    string `json:"id"`
	Alias string `json:"alias,omitempty"`
}

// ErrFailed and ErrOutcomeUnknown are the two kinds of agent error; match
// them with errors.Is.
var (
	ErrFailed         = errors.New("failed")
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrAuth marks an authentication failure; it is also ErrFailed.
	ErrAuth = errors.New("authentication failed")
)

// Error is an agent error with its operation and kind.
type Error struct {
	Op      string // e.g. "ipmi 127.0.0.1:623: chassis control"
	Unknown bool   // outcome unknown rather than failed
	Auth    bool   // authentication rejected (implies failed)
	Err     error
}

func (e *Error) Error() string {
	if r, ok := e.Err.(*refusal); ok {
		return e.Op + ": " + r.msg // it says what failed, and how
	}
	kind := "failed"
	if e.Unknown {
		kind = "outcome unknown"
	}
	if e.Err == nil {
		return e.Op + ": " + kind
	}
	return fmt.Sprintf("%s: %s: %v", e.Op, kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, ErrFailed) and errors.Is(err, ErrOutcomeUnknown) work.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrOutcomeUnknown:
		return e.Unknown
	case ErrFailed:
		return !e.Unknown
	case ErrAuth:
		return e.Auth
	}
	return false
}

// Failed wraps err as a failure of op.
func Failed(op string, err error) error { return &Error{Op: op, Err: err} }

// Unknown wraps err as an outcome-unknown error of op.
func Unknown(op string, err error) error { return &Error{Op: op, Unknown: true, Err: err} }

// AuthFailed wraps err as an authentication failure of op.
func AuthFailed(op string, err error) error { return &Error{Op: op, Auth: true, Err: err} }

// AuthRefused is the failure of op because the BMC at addr refused our
// credentials, worded for a person: "authentication failed at BMC
// 10.0.0.5:623 (check username "admin" and password_file /etc/fenced/bmc)".
// It names where the password comes from (CredentialHint), never the
// password, and leaves out the protocol library's own account (cipher
// suites, RAKP messages), which only restates it. said is the BMC's own
// answer, when it gave one beyond "no" (a Redfish message with its ID,
// an RMCP+ status such as "Unauthorized name"); it follows, cleaned by the
// caller of anything secret.
func AuthRefused(op, addr, username string, secrets Params, said string) error {
	msg := fmt.Sprintf("authentication failed at BMC %s (%s)", addr, CredentialHint(username, secrets))
	if said != "" {
		msg += ": the BMC answered " + said
	}
	return &Error{Op: op, Auth: true, Err: &refusal{msg: msg}}
}

// refusal is an AuthRefused message.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// CredentialHint says which credentials to check: the user name and where
// the password comes from (password_file PATH, password_script, or the
// password parameter). Never the password itself, nor the script's
// command line (it may carry one).
func CredentialHint(username string, secrets Params) string {
	var where string
	switch {
	case secrets["password_file"] != "":
		where = "password_file " + secrets["password_file"]
	case secrets["password_script"] != "":
		where = "the output of password_script"
	default:
		where = "the password parameter"
	}
	if username == "" {
		return "check the empty username and " + where
	}
	return fmt.Sprintf("check username %q and %s", username, where)
}

// IsUnknown reports whether err means the outcome is unknown. Errors that are
// not classified at all are treated as unknown: that is the safe reading.
func IsUnknown(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Unknown
	}
	return true
}

// Param describes one parameter of an agent, as fence-agents metadata does.
type Param struct {
	Name        string
	Description string
	// Type is "string", "boolean", "integer" or "second".
	Type     string
	Default  string
	Required bool
	// Secret parameters are never logged, printed or put on a command line.
	Secret bool
	// Deprecated names still accepted for this parameter (fence-agents
	// aliases). Resolve moves a value given under one to Name.
	Aliases []string
	// Precedence says which value counts when the parameter is given
	// under more than one of its names (FirstGiven unless set).
	Precedence Precedence
}

// Kind is a registered agent type.
type Kind struct {
	Name        string // "ipmi", "redfish", ...
	Description string // one line, shown in metadata
	// VendorURL is the web site of the device's vendor or standard, for
	// the metadata's <vendor-url> (empty when the agent is not one
	// vendor's, as fence_ipmilan's).
	VendorURL string
	Params    []Param
	// New builds an agent for one target from its parameters (the device's
	// parameters merged with the target's plug). It validates the
	// parameters and must not touch the network.
	New func(p Params, log *slog.Logger) (Agent, error)
	// OpenParams means Params lists only the agent's own parameters and New
	// checks all of them itself (exec: against the external program's
	// metadata), so config validation calls New rather than Check.
	OpenParams bool
	// ParamsFor, for an OpenParams kind, returns every parameter the agent
	// takes given its own (exec: its own and its program's, from the
	// program's metadata), so the FenceAgentAPI front-end can tell an
	// unknown parameter from one of the program's. It may run a program;
	// it touches no fence device.
	ParamsFor func(own Params) ([]Param, error)
}

// Registry maps agent names to kinds.
type Registry struct {
	mu    sync.RWMutex
	kinds map[string]*Kind
}

// NewRegistry returns an empty registry; tests build their own.
func NewRegistry() *Registry { return &Registry{kinds: map[string]*Kind{}} }

// Default is the registry built-in agents add themselves to from init.
var Default = NewRegistry()

// Register adds k. A duplicate or empty name is a programming error and
// panics at start-up.
func (r *Registry) Register(k Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k.Name == "" || k.New == nil {
		panic("agents: Register with empty name or nil New")
	}
	if _, dup := r.kinds[k.Name]; dup {
		panic("agents: duplicate agent " + k.Name)
	}
	kk := k
	r.kinds[k.Name] = &kk
}

// Register adds k to the Default registry.
func Register(k Kind) { Default.Register(k) }

// Lookup returns the kind named name.
func (r *Registry) Lookup(name string) (*Kind, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.kinds[name]
	return k, ok
}

// Names lists registered agent names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.kinds))
	for n := range r.kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
