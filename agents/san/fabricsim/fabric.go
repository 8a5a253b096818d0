package fabricsim

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Faults are the misbehaviours the fabric can be told to show.
type Faults struct {
	// ConcurrentChanges makes another administrator commit a change just
	// before each of the next N saves or enables, so they meet a checksum
	// mismatch. Negative means every time.
	ConcurrentChanges int
	// EnableNoEffect accepts enables (and commits the defined
	// configuration) but never updates the effective configuration.
	EnableNoEffect bool
	// EffectiveDelay is how long an enable takes to reach the effective
	// configuration, as on a large fabric.
	EffectiveDelay time.Duration
	// ServerErrors answers the next N requests with 503. Negative means
	// every request.
	ServerErrors int
	// Latency is added to every request.
	Latency time.Duration
}

// Options configure a Fabric.
type Options struct {
	// Users maps user names to passwords; default {"admin": "password"}.
	Users map[string]string
	// Zoning is the initial zoning database.
	Zoning Zoning
	// SwitchName is the fibrechannel-switch name; default "fabricsim".
	SwitchName string
}

// Fabric is one simulated fabric with its zoning database. Safe for
// concurrent use.
type Fabric struct {
	mu         sync.Mutex
	users      map[string]string
	switchName string

	committed *zoneDB
	gen       uint64
	checksum  string

	effCfg       string
	effZones     []Zone
	defaultAcc   int
	pendingEff   *pendingEffective // an enable on its way (EffectiveDelay)
	sessions     map[string]*session
	faults       Faults
	adminToggles int
	txCounter    int
	stats        Stats
}

type pendingEffective struct {
	cfg   string
	zones []Zone
	at    time.Time
}

type session struct {
	user string
	// tx is the transaction buffer, nil when no transaction is open; base
	// is the checksum of the committed database it was opened on.
	tx   *zoneDB
	base string
	tok  int
}

// Stats counts what the fabric was asked to do.
type Stats struct {
	Logins, Logouts, Saves, Enables, Conflicts, Aborts int
}

// New builds a fabric from o; it fails on an invalid initial zoning.
func New(o Options) (*Fabric, error) {
	db, err := fromZoning(o.Zoning)
	if err != nil {
		return nil, fmt.Errorf("fabricsim: initial zoning: %w", err)
	}
	users := o.Users
	if len(users) == 0 {
		users = map[string]string{"admin": "password"}
	}
	name := o.SwitchName
	if name == "" {
		name = "fabricsim"
	}
	f := &Fabric{users: users, switchName: name, committed: db, sessions: map[string]*session{}, defaultAcc: o.Zoning.DefaultZoneAccess}
	f.commitLocked(db)
	if o.Zoning.Enabled != "" {
		f.effCfg = o.Zoning.Enabled
		f.effZones = db.resolve(o.Zoning.Enabled)
	}
	return f, nil
}

// SetFaults replaces the fault knobs.
func (f *Fabric) SetFaults(fl Faults) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = fl
}

// Stats returns the counters.
func (f *Fabric) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Checksum returns the checksum of the committed database.
func (f *Fabric) Checksum() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checksum
}

// Defined returns a copy of the committed (defined) zoning database.
func (f *Fabric) Defined() Zoning {
	f.mu.Lock()
	defer f.mu.Unlock()
	var z Zoning
	d := f.committed.clone()
	for _, n := range sortedKeys(d.zones) {
		z.Zones = append(z.Zones, *d.zones[n])
	}
	for _, n := range sortedKeys(d.aliases) {
		z.Aliases = append(z.Aliases, *d.aliases[n])
	}
	for _, n := range sortedKeys(d.cfgs) {
		z.Cfgs = append(z.Cfgs, *d.cfgs[n])
	}
	z.Enabled = f.effCfg
	z.DefaultZoneAccess = f.defaultAcc
	return z
}

// Effective returns the enabled cfg name and its zones, aliases resolved.
func (f *Fabric) Effective() (string, []Zone) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applyPendingLocked()
	var zs []Zone
	for _, z := range f.effZones {
		zs = append(zs, Zone{Name: z.Name, Type: z.Type, Members: slices.Clone(z.Members), Principals: slices.Clone(z.Principals)})
	}
	return f.effCfg, zs
}

// AdminChange commits a change as another administrator would (a scratch
// zone is created or deleted), moving the checksum on.
func (f *Fabric) AdminChange() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adminChangeLocked()
}

func (f *Fabric) adminChangeLocked() {
	db := f.committed.clone()
	const scratch = "sim_other_admin"
	if db.zones[scratch] != nil {
		delete(db.zones, scratch)
	} else {
		f.adminToggles++
		db.zones[scratch] = &Zone{Name: scratch, Members: []string{fmt.Sprintf("10:00:00:00:c9:00:%02x:%02x", f.adminToggles>>8&0xff, f.adminToggles&0xff)}}
	}
	f.commitLocked(db)
}

func (f *Fabric) commitLocked(db *zoneDB) {
	f.committed = db
	f.gen++
	f.checksum = checksumOf(db, f.gen)
}

func (f *Fabric) applyPendingLocked() {
	if p := f.pendingEff; p != nil && !time.Now().Before(p.at) {
		f.effCfg, f.effZones, f.pendingEff = p.cfg, p.zones, nil
	}
}

func (f *Fabric) setEffectiveLocked(cfg string, zones []Zone) {
	if f.faults.EnableNoEffect {
		return
	}
	if f.faults.EffectiveDelay > 0 {
		f.pendingEff = &pendingEffective{cfg: cfg, zones: zones, at: time.Now().Add(f.faults.EffectiveDelay)}
		return
	}
	f.effCfg, f.effZones, f.pendingEff = cfg, zones, nil
}

func (f *Fabric) login(user, pass string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	want, ok := f.users[user]
	if !ok || want != pass {
		return "", false
	}
	b := make([]byte, 24)
	rand.Read(b)
	tok := base64.StdEncoding.EncodeToString(b)
	f.sessions[tok] = &session{user: user}
	f.stats.Logins++
	return tok, true
}

func (f *Fabric) logout(tok string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sessions[tok]; !ok {
		return false
	}
	delete(f.sessions, tok)
	f.stats.Logouts++
	return true
}

// Sessions returns how many sessions are open (a client that forgets to log
// out shows here).
func (f *Fabric) Sessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}
