// Package redfishsim is a Redfish BMC simulator faithful enough that a client
// passing against it works on real BMCs: it serves DMTF's public-rackmount1
// mockup and vendor-shaped variants of it (iDRAC, iLO, OpenBMC), quirk
// profiles of BMCs the project did not write (sushy-tools without a session
// service, a slow PoweringOff, PushPowerButton as the only ResetType, a
// session limit, a reset task that outlives the power change), with
// sessions, Basic auth, etags (If-Match on resets and on PATCH of AssetTag),
// Redfish-form errors, ComputerSystem power state with transition delays,
// asynchronous resets with task monitors, HTTPS with a generated
// certificate, and fault injection. Power-off and power-on hooks let tests
// and the demo power a simulated node off for real (kill its process).
//
// Use New for an http.Handler, or Start to serve it on a loopback address.
package redfishsim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Roles of simulated accounts.
const (
	RoleAdministrator = "Administrator"
	RoleReadOnly      = "ReadOnly"
)

// User is one account of the simulated BMC.
type User struct {
	Name, Password string
	Role           string // RoleAdministrator (default) or RoleReadOnly
}

// Options configure a simulator. The zero value is a DMTF-profile BMC with
// user admin/password, powered on, with instant transitions.
type Options struct {
	// Profile is one of Profiles(); "" means ProfileDMTF.
	Profile string
	// Users who may log in; default admin/password as Administrator.
	Users []User
	// SessionTimeout is the idle time after which a session expires
	// (SessionService.SessionTimeout); default 30 minutes.
	SessionTimeout time.Duration
	// PowerOffDelay and PowerOnDelay are how long PowerState reads
	// PoweringOff / PoweringOn before it reads Off / On. A zero
	// PowerOffDelay is the profile's (ProfilePowerOffDelay: SlowOffDelay
	// for ProfileSlowOff, else none).
	PowerOffDelay, PowerOnDelay time.Duration
	// TaskDelay is the least time a reset's task reads Running on the
	// profiles that answer resets with a task monitor (openbmc,
	// slow-task), even when the power changed sooner; zero is the
	// profile's (SlowTaskDelay for ProfileSlowTask, else none: the task
	// ends with the power transition).
	TaskDelay time.Duration
	// SessionLimit is how many sessions may be open at once; a login
	// beyond them is refused. Zero is the profile's (DefaultSessionLimit
	// for ProfileSessionLimit, else unlimited); negative is unlimited.
	SessionLimit int
	// InitialPowerState is "On" (default) or "Off".
	InitialPowerState string
	// AllowedResetTypes, if set, replaces the profile's list of allowed
	// ResetType values (to simulate a BMC that lacks the one you want).
	AllowedResetTypes []string
	// OnPowerOff runs when a system powers off, before PowerState reads
	// Off; OnPowerOn before it reads On. They get the system's Id.
	OnPowerOff, OnPowerOn func(systemID string)
	// Log receives one line per request at debug level; nil discards.
	Log *slog.Logger
}

// Faults are injected misbehaviours; change them at any time with SetFaults.
type Faults struct {
	// Latency delays every answer.
	Latency time.Duration
	// ServerErrors answers the next N requests with 503.
	ServerErrors int
	// DropConnections closes the connection of the next N requests
	// without answering.
	DropConnections int
	// ResetNeverCompletes leaves every reset in its transitional state
	// (PoweringOff/PoweringOn, task Running) forever.
	ResetNeverCompletes bool
	// ResetIgnored answers resets with success but never changes power.
	ResetIgnored bool
	// ResetAnswersLost carries out each of the next N resets, then closes
	// the connection without answering: the client cannot tell whether
	// its reset arrived.
	ResetAnswersLost int
	// BusyWhilePoweringOff refuses ForceOff with 409 while the system
	// reads PoweringOff, even from a graceful shutdown (a BMC that takes
	// no reset during a transition).
	BusyWhilePoweringOff bool
	// ExpireSessionAfter expires the first session that makes its Nth
	// authenticated request, just before serving it (one-shot).
	ExpireSessionAfter int
	// ConcurrentEdits has another client change the system (its AssetTag,
	// so its ETag) just before each of the next N resets is served: a reset
	// sent with the ETag read before it gets 412.
	ConcurrentEdits int
	// RejectIfMatch answers every reset that carries an If-Match other
	// than "*" with 412, as BMCs that do not support If-Match on actions do.
	RejectIfMatch bool
	// LoginRefused, if set, answers every login (POST to the Sessions
	// collection) with this HTTP status and a Redfish error, as a BMC
	// whose session service is disabled or missing does (404, 405, 501),
	// or one that is busy (503). With ProfileSushy, 401 answers as
	// sushy-tools itself does to a login without Basic credentials.
	LoginRefused int
	// ForeignLinks makes the BMC hand out links that name another host, as
	// a hostile or broken BMC might: each link of a listed kind gets the
	// value put in front of it, e.g. "@127.0.0.2:17520" (a text join onto
	// the base URL then changes the host) or "http://127.0.0.2:17520".
	ForeignLinks map[Link]string
}

// ResetRecord is one reset request the simulator accepted.
type ResetRecord struct {
	System    string // system Id
	ResetType string
	IfMatch   string // the request's If-Match header, if any
	At        time.Time
}

type system struct {
	uri, id string
	power   string
	gen     int // bumped by each reset: a newer reset supersedes older steps
	// graceful: PoweringOff is the operating system's own shutdown
	// (GracefulShutdown, or SetPowerState to PoweringOff: one that hangs),
	// which ForceOff cuts short; a hard off's PoweringOff it does not.
	graceful bool
	asset    string // AssetTag once written (PATCH or ConcurrentEdits)
	edited   bool
}

type session struct {
	id, token, user, role string
	lastUsed              time.Time
	requests              int
}

type task struct {
	id, uri, monitor string
	state, status    string
	start, end       time.Time
	messages         []any
}

// Sim is a simulated Redfish BMC. It is an http.Handler; all methods are
// safe for concurrent use.
type Sim struct {
	opts    Options
	prof    *profile
	log     *slog.Logger
	allowed []string

	mu       sync.Mutex
	systems  map[string]*system // by URI
	sessions map[string]*session
	tasks    map[string]*task
	faults   Faults
	nextTask int
	edits    int
	created  int
	refused  int
	resets   []ResetRecord
	requests int
	closed   bool
	done     chan struct{}
	wg       sync.WaitGroup
}

// New builds a simulator from opts.
func New(opts Options) (*Sim, error) {
	prof, err := buildProfile(opts.Profile)
	if err != nil {
		return nil, err
	}
	if len(opts.Users) == 0 {
		opts.Users = []User{{Name: "admin", Password: "password", Role: RoleAdministrator}}
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	if opts.PowerOffDelay == 0 {
		opts.PowerOffDelay = prof.powerOffDelay
	}
	if opts.TaskDelay == 0 {
		opts.TaskDelay = prof.taskDelay
	}
	if opts.SessionLimit == 0 {
		opts.SessionLimit = prof.sessionLimit
	}
	switch opts.InitialPowerState {
	case "":
		opts.InitialPowerState = "On"
	case "On", "Off":
	default:
		return nil, fmt.Errorf("redfishsim: InitialPowerState %q: want On or Off", opts.InitialPowerState)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sim{
		opts:     opts,
		prof:     prof,
		log:      log,
		systems:  map[string]*system{},
		sessions: map[string]*session{},
		tasks:    map[string]*task{},
		done:     make(chan struct{}),
	}
	for _, uri := range prof.systems {
		doc := prof.docs[uri]
		id, _ := doc["Id"].(string)
		s.systems[uri] = &system{uri: uri, id: id, power: opts.InitialPowerState}
		if opts.AllowedResetTypes != nil {
			reset := resetAction(doc)
			if info, ok := reset["@Redfish.ActionInfo"].(string); ok {
				params := prof.docs[info]["Parameters"].([]any)
				params[0].(map[string]any)["AllowableValues"] = stringsToAny(opts.AllowedResetTypes)
			} else {
				reset["ResetType@Redfish.AllowableValues"] = stringsToAny(opts.AllowedResetTypes)
			}
		}
	}
	s.allowed = s.allowedResetTypes(prof.systems[0])
	if d := prof.docs[serviceRoot+"/SessionService"]; d != nil {
		d["SessionTimeout"] = int(opts.SessionTimeout / time.Second)
	}
	return s, nil
}

func (s *Sim) allowedResetTypes(sysURI string) []string {
	reset := resetAction(s.prof.docs[sysURI])
	var vals []any
	if info, ok := reset["@Redfish.ActionInfo"].(string); ok {
		params, _ := s.prof.docs[info]["Parameters"].([]any)
		for _, p := range params {
			if m, _ := p.(map[string]any); m["Name"] == "ResetType" {
				vals, _ = m["AllowableValues"].([]any)
			}
		}
	} else {
		vals, _ = reset["ResetType@Redfish.AllowableValues"].([]any)
	}
	out := make([]string, 0, len(vals))
	for _, v := range vals {
		if str, ok := v.(string); ok {
			out = append(out, str)
		}
	}
	return out
}

// Profile returns the profile name being served.
func (s *Sim) Profile() string { return s.prof.name }

// SystemIDs returns the Ids of the simulated systems.
func (s *Sim) SystemIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, uri := range s.prof.systems {
		ids = append(ids, s.systems[uri].id)
	}
	return ids
}

// SystemURIs returns the URIs of the simulated systems.
func (s *Sim) SystemURIs() []string { return slices.Clone(s.prof.systems) }

func (s *Sim) systemByID(id string) *system {
	for _, sys := range s.systems {
		if sys.id == id || sys.uri == id {
			return sys
		}
	}
	return nil
}

// PowerState returns the PowerState of the system with the given Id (or
// URI); "" if there is none. With one system, id may be "".
func (s *Sim) PowerState(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" && len(s.prof.systems) == 1 {
		return s.systems[s.prof.systems[0]].power
	}
	if sys := s.systemByID(id); sys != nil {
		return sys.power
	}
	return ""
}

// SetPowerState sets a system's PowerState directly (the button on the box).
func (s *Sim) SetPowerState(id, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" && len(s.prof.systems) == 1 {
		id = s.prof.systems[0]
	}
	sys := s.systemByID(id)
	if sys == nil {
		return fmt.Errorf("redfishsim: no system %q", id)
	}
	sys.gen++
	sys.power = state
	sys.graceful = state == "PoweringOff"
	return nil
}

// SetFaults replaces the injected faults.
func (s *Sim) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Faults returns the faults in force (counters as they stand).
func (s *Sim) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// OpenSessions counts sessions that exist and have not expired.
func (s *Sim) OpenSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(time.Now())
	return len(s.sessions)
}

// SessionsCreated counts successful logins since start.
func (s *Sim) SessionsCreated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// LoginsRefused counts logins refused for want of a free session slot.
func (s *Sim) LoginsRefused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// Resets returns the accepted reset requests, oldest first.
func (s *Sim) Resets() []ResetRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.resets)
}

// Requests counts the requests served.
func (s *Sim) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Close stops pending power transitions and waits for them.
func (s *Sim) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Sim) sweepLocked(now time.Time) {
	for tok, se := range s.sessions {
		if now.Sub(se.lastUsed) > s.opts.SessionTimeout {
			delete(s.sessions, tok)
		}
	}
}

// ---- HTTP ----

// ServeHTTP implements http.Handler.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	f := s.faults
	drop, fail := false, false
	if s.faults.DropConnections > 0 {
		s.faults.DropConnections--
		drop = true
	} else if s.faults.ServerErrors > 0 {
		s.faults.ServerErrors--
		fail = true
	}
	s.mu.Unlock()
	s.log.Debug("request", "method", r.Method, "path", r.URL.Path)

	if f.Latency > 0 {
		select {
		case <-time.After(f.Latency):
		case <-r.Context().Done():
			return
		}
	}
	if drop {
		dropConnection(w)
	}
	h := w.Header()
	h.Set("OData-Version", "4.0")
	h.Set("Cache-Control", "no-cache")
	if fail {
		h.Set("Retry-After", "1")
		s.writeError(w, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable",
			"The service is temporarily unavailable.  Retry in 1 seconds.", "1")
		return
	}
	s.route(w, r, f)
}

// dropConnection closes the request's connection without an answer; it
// does not return.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
		}
	}
	panic(http.ErrAbortHandler) // ends the handler (and the stream, if still open) without an answer
}

func (s *Sim) route(w http.ResponseWriter, r *http.Request, f Faults) {
	p := r.URL.Path
	if p != "/" {
		p = strings.TrimSuffix(p, "/")
	}
	switch {
	case p == "/redfish":
		if !s.allowMethods(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"v1": "/redfish/v1/"})
		return
	case p == serviceRoot:
		// The service root is readable without authentication (DSP0266).
		if !s.allowMethods(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		s.writeDoc(w, withForeignLinks(f, serviceRoot, s.prof.docs[serviceRoot], false))
		return
	case p == serviceRoot+"/SessionService/Sessions" && r.Method == http.MethodPost:
		if s.prof.sessionless && f.LoginRefused == 0 {
			// No session service: nothing there to log in to.
			s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
				fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path), r.URL.Path)
			return
		}
		s.login(w, r, f)
		return
	case !strings.HasPrefix(p, serviceRoot+"/"):
		s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
			fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path), r.URL.Path)
		return
	}

	se, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	switch {
	case s.prof.sessionless && (p == serviceRoot+"/SessionService" || strings.HasPrefix(p, serviceRoot+"/SessionService/")):
		s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
			fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path), r.URL.Path)
	case p == serviceRoot+"/SessionService/Sessions":
		if s.allowMethods(w, r, http.MethodGet, http.MethodHead, http.MethodPost) {
			s.listSessions(w)
		}
	case strings.HasPrefix(p, serviceRoot+"/SessionService/Sessions/"):
		s.sessionResource(w, r, strings.TrimPrefix(p, serviceRoot+"/SessionService/Sessions/"))
	case strings.HasSuffix(p, "/Actions/ComputerSystem.Reset"):
		s.reset(w, r, strings.TrimSuffix(p, "/Actions/ComputerSystem.Reset"), se, f)
	case strings.HasPrefix(p, serviceRoot+"/TaskService/TaskMonitors/"):
		s.taskMonitor(w, r, strings.TrimPrefix(p, serviceRoot+"/TaskService/TaskMonitors/"), f)
	case p == serviceRoot+"/TaskService/Tasks":
		if s.allowMethods(w, r, http.MethodGet, http.MethodHead) {
			s.listTasks(w)
		}
	case strings.HasPrefix(p, serviceRoot+"/TaskService/Tasks/"):
		if s.allowMethods(w, r, http.MethodGet, http.MethodHead) {
			s.taskResource(w, strings.TrimPrefix(p, serviceRoot+"/TaskService/Tasks/"))
		}
	default:
		doc, ok := s.prof.docs[p]
		if !ok {
			s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
				fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path), r.URL.Path)
			return
		}
		s.mu.Lock()
		sys := s.systems[p]
		s.mu.Unlock()
		if sys != nil && r.Method == http.MethodPatch {
			s.patchSystem(w, r, sys, se)
			return
		}
		methods := []string{http.MethodGet, http.MethodHead}
		if sys != nil {
			methods = append(methods, http.MethodPatch)
		}
		if !s.allowMethods(w, r, methods...) {
			return
		}
		s.mu.Lock()
		if sys != nil {
			doc = s.systemDocLocked(sys)
		}
		s.mu.Unlock()
		s.writeDoc(w, withForeignLinks(f, p, doc, sys != nil))
	}
}

// patchSystem updates a system's writable properties; only AssetTag is
// writable here. If-Match is honoured (412 on a stale ETag), and the
// answer is the updated resource.
func (s *Sim) patchSystem(w http.ResponseWriter, r *http.Request, sys *system, se *session) {
	body, ok := s.writeRequest(w, r, se)
	if !ok {
		return
	}
	var asset string
	for k, v := range body {
		if k != "AssetTag" {
			s.writeError(w, http.StatusBadRequest, "PropertyNotWritable",
				fmt.Sprintf("The property %s is a read only property and cannot be assigned a value.", k), k)
			return
		}
		str, ok := v.(string)
		if !ok {
			s.writeError(w, http.StatusBadRequest, "PropertyValueTypeError",
				fmt.Sprintf("The value '%v' for the property %s is of a different type than the property can accept.", v, k), fmt.Sprint(v), k)
			return
		}
		asset = str
	}
	s.mu.Lock()
	if s.ifMatchFailsLocked(r, sys, false) {
		s.mu.Unlock()
		s.preconditionFailed(w)
		return
	}
	if _, ok := body["AssetTag"]; ok {
		sys.asset, sys.edited = asset, true
	}
	doc := s.systemDocLocked(sys)
	s.mu.Unlock()
	s.writeDoc(w, doc)
}

// writeRequest admits a request that changes something: the session may
// write, and the body is a JSON object (read up to 64 KiB). Otherwise it
// answers the Redfish error and returns false.
func (s *Sim) writeRequest(w http.ResponseWriter, r *http.Request, se *session) (map[string]any, bool) {
	if se.role == RoleReadOnly {
		s.writeError(w, http.StatusForbidden, "InsufficientPrivilege",
			"There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.")
		return nil, false
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	var body map[string]any
	if err != nil || json.Unmarshal(raw, &body) != nil {
		s.writeError(w, http.StatusBadRequest, "MalformedJSON",
			"The request body submitted was malformed JSON and could not be parsed by the receiving service.")
		return nil, false
	}
	return body, true
}

// ifMatchFailsLocked reports whether the request's If-Match (other than
// "*") does not match sys's ETag, or carries one at all when refuseAll (a
// BMC that takes no If-Match on the request). s.mu must be held.
func (s *Sim) ifMatchFailsLocked(r *http.Request, sys *system, refuseAll bool) bool {
	m := r.Header.Get("If-Match")
	return m != "" && m != "*" && (refuseAll || m != etagOf(s.systemDocLocked(sys)))
}

func (s *Sim) preconditionFailed(w http.ResponseWriter) {
	s.writeError(w, http.StatusPreconditionFailed, "PreconditionFailed",
		"The ETag supplied did not match the ETag required to change this resource.")
}

func (s *Sim) allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	s.writeError(w, http.StatusMethodNotAllowed, "OperationNotAllowed",
		fmt.Sprintf("The HTTP method %s is not allowed on %s.", r.Method, r.URL.Path))
	return false
}

// systemDocLocked is a system's document with its live PowerState.
func (s *Sim) systemDocLocked(sys *system) map[string]any {
	base := s.prof.docs[sys.uri]
	doc := make(map[string]any, len(base)+1)
	for k, v := range base {
		doc[k] = v
	}
	doc["PowerState"] = sys.power
	if sys.edited {
		doc["AssetTag"] = sys.asset
	}
	return doc
}

// etagOf is a strong ETag over the document's content.
func etagOf(doc map[string]any) string {
	b, _ := json.Marshal(doc)
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf(`"%016x"`, h.Sum64())
}

func (s *Sim) writeDoc(w http.ResponseWriter, doc map[string]any) {
	out := make(map[string]any, len(doc)+1)
	for k, v := range doc {
		out[k] = v
	}
	tag := etagOf(doc)
	out["@odata.etag"] = tag
	w.Header().Set("ETag", tag)
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// redfishError is the Redfish error body (DSP0266 "Error responses").
func redfishError(messageID, message string, args ...string) map[string]any {
	if args == nil {
		args = []string{}
	}
	return map[string]any{"error": map[string]any{
		"code":    "Base.1.8.GeneralError",
		"message": "A general error has occurred. See ExtendedInfo for more information.",
		"@Message.ExtendedInfo": []any{map[string]any{
			"@odata.type": "#Message.v1_1_1.Message",
			"MessageId":   "Base.1.8." + messageID,
			"Message":     message,
			"MessageArgs": args,
			"Severity":    "Critical",
			"Resolution":  "See the message and correct the request.",
		}},
	}}
}

func (s *Sim) writeError(w http.ResponseWriter, status int, messageID, message string, args ...string) {
	if s.prof.sushyErrors {
		writeJSON(w, status, sushyError(message))
		return
	}
	writeJSON(w, status, redfishError(messageID, message, args...))
}

// sushyError is an error as sushy-tools writes it: what happened is only
// in error.message; the code and the one ExtendedInfo entry (a MessageId
// without a Message) say nothing more than "general error".
func sushyError(message string) map[string]any {
	return map[string]any{"error": map[string]any{
		"code":    "Base.1.0.GeneralError",
		"message": message,
		"@Message.ExtendedInfo": []any{map[string]any{
			"@odata.type": "/redfish/v1/$metadata#Message.1.0.0.Message",
			"MessageId":   "Base.1.0.GeneralError",
		}},
	}}
}

// ---- authentication and sessions ----

func (s *Sim) findUser(name, password string) (User, bool) {
	for _, u := range s.opts.Users {
		if u.Name == name && u.Password == password {
			if u.Role == "" {
				u.Role = RoleAdministrator
			}
			return u, true
		}
	}
	return User{}, false
}

// authenticate checks X-Auth-Token or Basic credentials; on failure it has
// written a 401 and returns false.
func (s *Sim) authenticate(w http.ResponseWriter, r *http.Request) (*session, bool) {
	now := time.Now()
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		s.mu.Lock()
		s.sweepLocked(now)
		se, ok := s.sessions[tok]
		if ok {
			se.requests++
			if s.faults.ExpireSessionAfter > 0 && se.requests >= s.faults.ExpireSessionAfter {
				s.faults.ExpireSessionAfter = 0
				delete(s.sessions, tok)
				ok = false
			} else {
				se.lastUsed = now
			}
		}
		s.mu.Unlock()
		if ok {
			return se, true
		}
		s.writeError(w, http.StatusUnauthorized, "NoValidSession",
			"There is no valid session established with the implementation.")
		return nil, false
	}
	if user, pass, ok := r.BasicAuth(); ok {
		if u, ok := s.findUser(user, pass); ok {
			return &session{user: u.Name, role: u.Role}, true
		}
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="Redfish"`)
	msg := "There is no valid session established with the implementation."
	if s.prof.sushyErrors {
		msg = "Incorrect username or password"
	}
	s.writeError(w, http.StatusUnauthorized, "NoValidSession", msg)
	return nil, false
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Sim) login(w http.ResponseWriter, r *http.Request, f Faults) {
	if f.LoginRefused != 0 {
		msg := fmt.Sprintf("The HTTP method POST is not allowed on %s.", r.URL.Path)
		id := "OperationNotAllowed"
		switch f.LoginRefused {
		case http.StatusNotFound:
			id, msg = "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path)
		case http.StatusServiceUnavailable:
			id, msg = "ServiceTemporarilyUnavailable", "The service is temporarily unavailable.  Retry in 1 seconds."
		}
		if f.LoginRefused == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", "GET, HEAD")
		}
		s.writeError(w, f.LoginRefused, id, msg)
		return
	}
	var body map[string]any
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil || json.Unmarshal(raw, &body) != nil || body == nil {
		s.writeError(w, http.StatusBadRequest, "MalformedJSON",
			"The request body submitted was malformed JSON and could not be parsed by the receiving service.")
		return
	}
	for _, prop := range []string{"UserName", "Password"} {
		v, ok := body[prop]
		if !ok {
			s.writeError(w, http.StatusBadRequest, "PropertyMissing",
				fmt.Sprintf("The property %s is a required property and must be included in the request.", prop), prop)
			return
		}
		if _, ok := v.(string); !ok {
			s.writeError(w, http.StatusBadRequest, "PropertyValueTypeError",
				fmt.Sprintf("The value for the property %s is of a different type than the property can accept.", prop), prop)
			return
		}
	}
	u, ok := s.findUser(body["UserName"].(string), body["Password"].(string))
	if !ok {
		// Never echo the submitted password.
		s.writeError(w, http.StatusUnauthorized, "ResourceAtUriUnauthorized",
			"While accessing the resource at '/redfish/v1/SessionService/Sessions', the service received an authorization error 'invalid credentials'.",
			"/redfish/v1/SessionService/Sessions", "invalid credentials")
		return
	}
	se := &session{id: randomHex(8), token: randomHex(16), user: u.Name, role: u.Role, lastUsed: time.Now()}
	if s.prof.name == ProfileILO {
		se.id = u.Name + se.id
	}
	s.mu.Lock()
	s.sweepLocked(time.Now())
	if limit := s.opts.SessionLimit; limit > 0 && len(s.sessions) >= limit {
		// As DSP0268's Base registry words it; BMCs answer 503 (or 400)
		// and the slots free up only by logout or expiry.
		s.refused++
		s.mu.Unlock()
		s.writeError(w, http.StatusServiceUnavailable, "SessionLimitExceeded",
			"The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.")
		return
	}
	s.sessions[se.token] = se
	s.created++
	s.mu.Unlock()
	loc := serviceRoot + "/SessionService/Sessions/" + se.id
	if s.prof.absoluteSessionLocation {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		loc = scheme + "://" + r.Host + loc
	}
	w.Header().Set("X-Auth-Token", se.token)
	w.Header().Set("Location", foreign(f, LinkSessionLocation, loc))
	writeJSON(w, http.StatusCreated, sessionDoc(se))
}

func sessionDoc(se *session) map[string]any {
	return map[string]any{
		"@odata.id":   serviceRoot + "/SessionService/Sessions/" + se.id,
		"@odata.type": "#Session.v1_6_0.Session",
		"Id":          se.id,
		"Name":        "User Session",
		"Description": "Manager User Session",
		"UserName":    se.user,
	}
}

func (s *Sim) listSessions(w http.ResponseWriter) {
	s.mu.Lock()
	var ids []string
	for _, se := range s.sessions {
		ids = append(ids, se.id)
	}
	s.mu.Unlock()
	sort.Strings(ids)
	members := []any{}
	for _, id := range ids {
		members = append(members, map[string]any{"@odata.id": serviceRoot + "/SessionService/Sessions/" + id})
	}
	doc := map[string]any{}
	for k, v := range s.prof.docs[serviceRoot+"/SessionService/Sessions"] {
		doc[k] = v
	}
	doc["Members"] = members
	doc["Members@odata.count"] = len(members)
	s.writeDoc(w, doc)
}

func (s *Sim) sessionResource(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	var found *session
	for _, se := range s.sessions {
		if se.id == id {
			found = se
		}
	}
	if found == nil {
		s.mu.Unlock()
		s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
			fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path), r.URL.Path)
		return
	}
	if r.Method == http.MethodDelete {
		delete(s.sessions, found.token)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	doc := sessionDoc(found)
	s.mu.Unlock()
	if s.allowMethods(w, r, http.MethodGet, http.MethodHead, http.MethodDelete) {
		s.writeDoc(w, doc)
	}
}

// ---- power ----

var (
	offTypes     = []string{"ForceOff", "GracefulShutdown"}
	onTypes      = []string{"On", "ForceOn"}
	restartTypes = []string{"ForceRestart", "GracefulRestart", "PowerCycle", "FullPowerCycle"}
)

func (s *Sim) reset(w http.ResponseWriter, r *http.Request, sysURI string, se *session, fl Faults) {
	s.mu.Lock()
	sys := s.systems[sysURI]
	s.mu.Unlock()
	if sys == nil {
		s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
			fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path), r.URL.Path)
		return
	}
	if !s.allowMethods(w, r, http.MethodPost) {
		return
	}
	body, ok := s.writeRequest(w, r, se)
	if !ok {
		return
	}
	for k := range body {
		if k != "ResetType" {
			s.writeError(w, http.StatusBadRequest, "ActionParameterUnknown",
				fmt.Sprintf("The action Reset was submitted with the invalid parameter %s.", k), "Reset", k)
			return
		}
	}
	rv, ok := body["ResetType"]
	if !ok {
		s.writeError(w, http.StatusBadRequest, "ActionParameterMissing",
			"The action Reset requires the parameter ResetType to be present in the request body.", "Reset", "ResetType")
		return
	}
	rt, ok := rv.(string)
	if !ok {
		s.writeError(w, http.StatusBadRequest, "ActionParameterValueTypeError",
			"The value for the parameter ResetType in the action Reset is of a different type than the parameter can accept.", "ResetType", "Reset")
		return
	}
	allowed := s.allowedResetTypes(sysURI)
	if !slices.Contains(allowed, rt) {
		s.writeError(w, http.StatusBadRequest, "ActionParameterValueNotInList",
			fmt.Sprintf("The value '%s' for the parameter ResetType in the action Reset is not in the list of acceptable values.", rt), rt, "ResetType", "Reset")
		return
	}

	s.mu.Lock()
	if s.faults.ConcurrentEdits > 0 {
		s.faults.ConcurrentEdits--
		s.edits++
		sys.asset, sys.edited = fmt.Sprintf("edited-%d", s.edits), true
	}
	if s.ifMatchFailsLocked(r, sys, s.faults.RejectIfMatch) {
		s.mu.Unlock()
		s.preconditionFailed(w)
		return
	}
	var steps []string
	switch {
	case rt == "ForceOff" && sys.power == "PoweringOff" && sys.graceful:
		if s.faults.BusyWhilePoweringOff {
			s.mu.Unlock()
			s.writeError(w, http.StatusConflict, "OperationNotAllowed", "Unable to perform the reset because the server is powering off.")
			return
		}
		steps = []string{"Off"} // the power is cut, the shutdown not waited for
	case slices.Contains(offTypes, rt):
		if sys.power != "Off" && sys.power != "PoweringOff" {
			steps = []string{"Off"}
			if rt == "GracefulShutdown" {
				steps = []string{"GracefulOff"}
			}
		}
	case slices.Contains(onTypes, rt):
		if sys.power != "On" && sys.power != "PoweringOn" {
			steps = []string{"On"}
		}
	case rt == "PushPowerButton":
		if sys.power == "On" || sys.power == "PoweringOn" {
			steps = []string{"Off"}
		} else {
			steps = []string{"On"}
		}
	case slices.Contains(restartTypes, rt):
		if sys.power == "Off" || sys.power == "PoweringOff" {
			steps = []string{"On"}
		} else {
			steps = []string{"Off", "On"}
		}
	}
	if steps == nil && s.prof.conflictOnNoop && rt != "Nmi" {
		state := sys.power
		s.mu.Unlock()
		s.writeError(w, http.StatusConflict, "OperationNotAllowed",
			fmt.Sprintf("Unable to perform the reset because the server is already %s.", strings.ToLower(state)))
		return
	}
	s.resets = append(s.resets, ResetRecord{System: sys.id, ResetType: rt, IfMatch: r.Header.Get("If-Match"), At: time.Now()})
	f := s.faults
	lose := s.faults.ResetAnswersLost > 0
	if lose {
		s.faults.ResetAnswersLost--
	}
	var t *task
	if s.prof.resetStyle == "202" {
		s.nextTask++
		id := strconv.Itoa(s.nextTask)
		t = &task{
			id: id, uri: serviceRoot + "/TaskService/Tasks/" + id,
			monitor: serviceRoot + "/TaskService/TaskMonitors/" + id,
			state:   "Running", status: "OK", start: time.Now(),
		}
		s.tasks[id] = t
	}
	if f.ResetIgnored {
		steps = nil
	}
	// A reset that changes nothing (ForceOff during a hard off's
	// PoweringOff) leaves the transition under way alone.
	if steps != nil {
		sys.gen++
	}
	gen := sys.gen
	inline := s.opts.PowerOffDelay == 0 && s.opts.PowerOnDelay == 0 && !f.ResetNeverCompletes
	if !inline && steps != nil && !s.closed {
		// The BMC has taken the command: the transition shows at once.
		if steps[0] != "On" {
			sys.power = "PoweringOff"
		} else {
			sys.power = "PoweringOn"
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runSteps(sys, gen, steps, t, f.ResetNeverCompletes)
		}()
	}
	s.mu.Unlock()
	if inline || steps == nil {
		s.runSteps(sys, gen, steps, t, false)
	}
	if lose {
		dropConnection(w)
	}

	switch s.prof.resetStyle {
	case "202":
		w.Header().Set("Location", foreign(fl, LinkTaskLocation, t.monitor))
		s.mu.Lock()
		doc := taskDocLocked(t)
		s.mu.Unlock()
		writeJSON(w, http.StatusAccepted, doc)
	case "200":
		// iLO 5 answers a successful action with an error-shaped body.
		writeJSON(w, http.StatusOK, map[string]any{"error": map[string]any{
			"code":    "iLO.0.10.ExtendedInfo",
			"message": "See @Message.ExtendedInfo for more information.",
			"@Message.ExtendedInfo": []any{map[string]any{
				"MessageId": "Base.1.4.Success",
			}},
		}})
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// runSteps walks a system through power steps ("Off", "On"), each with its
// transitional state and delay, running hooks before the final state shows.
// A newer reset (gen changed) or Close stops it. With hang, it stops in the
// first transitional state forever.
func (s *Sim) runSteps(sys *system, gen int, steps []string, t *task, hang bool) {
	for _, step := range steps {
		delay, trans, hook := s.opts.PowerOffDelay, "PoweringOff", s.opts.OnPowerOff
		graceful := step == "GracefulOff"
		switch step {
		case "On":
			delay, trans, hook = s.opts.PowerOnDelay, "PoweringOn", s.opts.OnPowerOn
		case "GracefulOff":
			step = "Off"
		}
		s.mu.Lock()
		if sys.gen != gen {
			s.mu.Unlock()
			return
		}
		sys.graceful = graceful
		if delay > 0 || hang {
			sys.power = trans
		}
		s.mu.Unlock()
		if hang {
			return
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-s.done:
				return
			}
		}
		if hook != nil {
			hook(sys.id)
		}
		s.mu.Lock()
		if sys.gen != gen {
			s.mu.Unlock()
			return
		}
		sys.power, sys.graceful = step, false
		s.mu.Unlock()
	}
	if t != nil {
		s.endTask(t)
	}
}

// endTask completes t, at once or, when the task must read Running for
// TaskDelay from its start, once that has passed (a BMC whose task
// outlives the power change it made).
func (s *Sim) endTask(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if wait := time.Until(t.start.Add(s.opts.TaskDelay)); wait > 0 {
		if s.closed {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			select {
			case <-time.After(wait):
			case <-s.done:
				return
			}
			s.mu.Lock()
			s.completeTaskLocked(t)
			s.mu.Unlock()
		}()
		return
	}
	s.completeTaskLocked(t)
}

func (s *Sim) completeTaskLocked(t *task) {
	if t.state != "Running" {
		return
	}
	t.state = "Completed"
	t.end = time.Now()
	t.messages = []any{map[string]any{
		"@odata.type": "#Message.v1_1_1.Message",
		"MessageId":   "TaskEvent.1.0.TaskCompletedOK",
		"Message":     fmt.Sprintf("The task with Id '%s' has completed.", t.id),
		"MessageArgs": []any{t.id},
		"Severity":    "OK",
	}}
}

// ---- tasks ----

func taskDocLocked(t *task) map[string]any {
	doc := map[string]any{
		"@odata.id":   t.uri,
		"@odata.type": "#Task.v1_7_0.Task",
		"Id":          t.id,
		"Name":        "Task " + t.id,
		"TaskState":   t.state,
		"TaskStatus":  t.status,
		"TaskMonitor": t.monitor,
		"StartTime":   t.start.Format(time.RFC3339),
		"Messages":    t.messages,
	}
	if doc["Messages"] == nil {
		doc["Messages"] = []any{}
	}
	if !t.end.IsZero() {
		doc["EndTime"] = t.end.Format(time.RFC3339)
	}
	return doc
}

func (s *Sim) taskMonitor(w http.ResponseWriter, r *http.Request, id string, f Faults) {
	if !s.allowMethods(w, r, http.MethodGet) {
		return
	}
	s.mu.Lock()
	t := s.tasks[id]
	if t == nil {
		s.mu.Unlock()
		s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
			fmt.Sprintf("The resource at the URI '%s' was not found.", r.URL.Path), r.URL.Path)
		return
	}
	doc := taskDocLocked(t)
	running := t.state == "Running"
	s.mu.Unlock()
	if running {
		w.Header().Set("Location", foreign(f, LinkTaskLocation, t.monitor))
		writeJSON(w, http.StatusAccepted, doc)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

func (s *Sim) taskResource(w http.ResponseWriter, id string) {
	s.mu.Lock()
	t := s.tasks[id]
	var doc map[string]any
	if t != nil {
		doc = taskDocLocked(t)
	}
	s.mu.Unlock()
	if t == nil {
		s.writeError(w, http.StatusNotFound, "ResourceMissingAtURI", "The task was not found.")
		return
	}
	s.writeDoc(w, doc)
}

func (s *Sim) listTasks(w http.ResponseWriter) {
	s.mu.Lock()
	var ids []int
	for id := range s.tasks {
		n, _ := strconv.Atoi(id)
		ids = append(ids, n)
	}
	s.mu.Unlock()
	sort.Ints(ids)
	members := []any{}
	for _, id := range ids {
		members = append(members, map[string]any{"@odata.id": fmt.Sprintf("%s/TaskService/Tasks/%d", serviceRoot, id)})
	}
	doc := map[string]any{}
	for k, v := range s.prof.docs[serviceRoot+"/TaskService/Tasks"] {
		doc[k] = v
	}
	doc["Members"] = members
	doc["Members@odata.count"] = len(members)
	s.writeDoc(w, doc)
}
