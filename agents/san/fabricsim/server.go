package fabricsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

const (
	mediaJSON = "application/yang-data+json"
	tokPrefix = "Custom_Basic "

	actionSave    = 1
	actionDisable = 2
	actionClear   = 3
	actionAbort   = 4

	dbMax = 1045274 // bytes, as a 9.x switch reports
)

// apiError is a RESTCONF error with its HTTP status.
type apiError struct {
	status int
	tag    string
	msg    string
	path   string
}

func (e *apiError) Error() string { return e.msg }

func opFailed(path, format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, tag: "operation-failed", msg: fmt.Sprintf(format, a...), path: path}
}

func invalidValue(path, format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, tag: "invalid-value", msg: fmt.Sprintf(format, a...), path: path}
}

// ServeHTTP implements the FOS REST endpoints the san agent uses.
func (f *Fabric) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	latency := f.faults.Latency
	fail := f.faults.ServerErrors != 0
	if f.faults.ServerErrors > 0 {
		f.faults.ServerErrors--
	}
	f.mu.Unlock()
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	if fail {
		writeErr(w, &apiError{status: http.StatusServiceUnavailable, tag: "operation-failed", msg: "Service unavailable: the REST server is busy"})
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/rest/login" && r.Method == http.MethodPost:
		f.serveLogin(w, r)
		return
	case path == "/rest/logout" && r.Method == http.MethodPost:
		if !f.logout(strings.TrimPrefix(r.Header.Get("Authorization"), tokPrefix)) {
			writeErr(w, unauthorized())
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), tokPrefix)
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[tok]
	if s == nil {
		writeErr(w, unauthorized())
		return
	}
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		if err != nil {
			writeErr(w, &apiError{status: http.StatusBadRequest, tag: "malformed-message", msg: "cannot read request body"})
			return
		}
		body = b
	}
	if len(bytes.TrimSpace(body)) > 0 && !strings.HasPrefix(r.Header.Get("Content-Type"), mediaJSON) && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		writeErr(w, &apiError{status: http.StatusUnsupportedMediaType, tag: "malformed-message", msg: "Content-Type must be " + mediaJSON})
		return
	}
	rel, ok := cutAny(path, "/rest/running/brocade-zone/", "/rest/running/zoning/")
	var resp any
	var err *apiError
	switch {
	case path == "/rest/running/brocade-fibrechannel-switch/fibrechannel-switch" && r.Method == http.MethodGet:
		resp = map[string]any{"fibrechannel-switch": map[string]any{
			"name": "10:00:c4:f5:7c:00:00:01", "domain-id": 1, "user-friendly-name": f.switchName,
			"firmware-version": "v9.2.0", "operational-status": 2, "is-enabled-state": true,
		}}
	case ok && (rel == "defined-configuration" || strings.HasPrefix(rel, "defined-configuration/")):
		resp, err = f.serveDefined(s, r.Method, strings.TrimPrefix(strings.TrimPrefix(rel, "defined-configuration"), "/"), body)
	case ok && (rel == "effective-configuration" || strings.HasPrefix(rel, "effective-configuration/")):
		resp, err = f.serveEffective(s, r.Method, strings.TrimPrefix(strings.TrimPrefix(rel, "effective-configuration"), "/"), body)
	default:
		err = &apiError{status: http.StatusNotFound, tag: "invalid-value", msg: "Invalid resource: " + path}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	if resp == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", mediaJSON)
	b, _ := json.Marshal(map[string]any{"Response": resp})
	w.Write(b)
}

func cutAny(s string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest, true
		}
	}
	return "", false
}

func unauthorized() *apiError {
	return &apiError{status: http.StatusUnauthorized, tag: "access-denied", msg: "Invalid credentials or session expired"}
}

func writeErr(w http.ResponseWriter, e *apiError) {
	var we wireErrors
	typ := "application"
	if e.status == http.StatusUnauthorized {
		typ = "protocol"
	}
	we.Errors.Error = []wireError{{ErrorType: typ, ErrorTag: e.tag, ErrorAppTag: "error", ErrorPath: e.path, ErrorMessage: e.msg,
		ErrorInfo: map[string]any{"error-module": "zone"}}}
	b, _ := json.Marshal(we)
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(e.status)
	w.Write(b)
}

func (f *Fabric) serveLogin(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	if !ok {
		writeErr(w, &apiError{status: http.StatusUnauthorized, tag: "access-denied", msg: "Authentication required: Basic credentials missing"})
		return
	}
	tok, ok := f.login(user, pass)
	if !ok {
		writeErr(w, &apiError{status: http.StatusUnauthorized, tag: "access-denied", msg: "Authentication failed: invalid user name or password"})
		return
	}
	w.Header().Set("Authorization", tokPrefix+tok)
	w.Header().Set("Content-Type", mediaJSON)
	b, _ := json.Marshal(map[string]any{"Response": map[string]any{"switch-parameters": map[string]any{
		"switch-name": f.switchName, "fos-version": "v9.2.0", "user-role": "admin", "session-timeout": 7200,
	}}})
	w.Write(b)
}

// view is what session s sees: its transaction buffer if it has one.
func (f *Fabric) view(s *session) *zoneDB {
	if s.tx != nil {
		return s.tx
	}
	return f.committed
}

func (f *Fabric) openTx(s *session) *zoneDB {
	if s.tx == nil {
		s.tx = f.committed.clone()
		s.base = f.checksum
		f.txCounter++
		s.tok = 100000 + f.txCounter
	}
	return s.tx
}

func (f *Fabric) serveDefined(s *session, method, sub string, body []byte) (any, *apiError) {
	const base = "/brocade-zone:defined-configuration"
	if method == http.MethodGet {
		w := f.view(s).toWire()
		switch sub {
		case "":
			return map[string]any{"defined-configuration": w}, nil
		case "zone":
			return map[string]any{"zone": w.Zone}, nil
		case "alias":
			return map[string]any{"alias": w.Alias}, nil
		case "cfg":
			return map[string]any{"cfg": w.Cfg}, nil
		}
		return nil, &apiError{status: http.StatusNotFound, tag: "invalid-value", msg: "Invalid resource: defined-configuration/" + sub}
	}
	if sub != "" {
		return nil, &apiError{status: http.StatusMethodNotAllowed, tag: "operation-not-supported", msg: method + " is supported on defined-configuration only"}
	}
	var req struct {
		D *wireDefined `json:"defined-configuration"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.D == nil {
		return nil, &apiError{status: http.StatusBadRequest, tag: "malformed-message", msg: "Invalid request body: expected {\"defined-configuration\":{...}}", path: base}
	}
	// Work on a copy so a request that fails half-way changes nothing, and
	// opens no transaction.
	tx := f.view(s).clone()
	var err *apiError
	switch method {
	case http.MethodPost:
		err = postDefined(tx, req.D)
	case http.MethodPatch:
		err = patchDefined(tx, req.D)
	case http.MethodDelete:
		err = deleteDefined(tx, req.D)
	default:
		err = &apiError{status: http.StatusMethodNotAllowed, tag: "operation-not-supported", msg: "method not allowed: " + method}
	}
	if err != nil {
		return nil, err
	}
	f.openTx(s)
	s.tx = tx
	return nil, nil
}

func normList(path string, in []string, aliasesOK bool) ([]string, *apiError) {
	var out []string
	for _, m := range in {
		n, err := normMember(m)
		if err != nil {
			return nil, invalidValue(path, "%v", err)
		}
		if !aliasesOK && isAliasName(n) {
			return nil, invalidValue(path, "invalid alias member %q: not a WWN or domain,port", m)
		}
		out = append(out, n)
	}
	return out, nil
}

func addUnique(list []string, add []string) []string {
	for _, m := range add {
		if !slices.Contains(list, m) {
			list = append(list, m)
		}
	}
	return list
}

func postDefined(tx *zoneDB, d *wireDefined) *apiError {
	for _, a := range d.Alias {
		p := "/alias/" + a.AliasName
		if !nameRE.MatchString(a.AliasName) {
			return invalidValue(p, "Invalid alias name %q", a.AliasName)
		}
		var in []string
		if a.MemberEntry != nil {
			in = a.MemberEntry.AliasEntryName
		}
		ms, err := normList(p, in, false)
		if err != nil {
			return err
		}
		if cur := tx.aliases[a.AliasName]; cur != nil {
			cur.Members = addUnique(cur.Members, ms)
		} else {
			if len(ms) == 0 {
				return opFailed(p, "Alias %s must have at least one member", a.AliasName)
			}
			tx.aliases[a.AliasName] = &Alias{Name: a.AliasName, Members: addUnique(nil, ms)}
		}
	}
	for _, z := range d.Zone {
		p := "/zone/" + z.ZoneName
		if !nameRE.MatchString(z.ZoneName) {
			return invalidValue(p, "Invalid zone name %q", z.ZoneName)
		}
		var me wireMemberEntry
		if z.MemberEntry != nil {
			me = *z.MemberEntry
		}
		ms, err := normList(p, me.EntryName, true)
		if err != nil {
			return err
		}
		ps, err := normList(p, me.PrincipalEntryName, true)
		if err != nil {
			return err
		}
		if cur := tx.zones[z.ZoneName]; cur != nil {
			cur.Members = addUnique(cur.Members, ms)
			cur.Principals = addUnique(cur.Principals, ps)
			continue
		}
		if len(ms)+len(ps) == 0 {
			return opFailed(p, "Zone %s must have at least one member", z.ZoneName)
		}
		nz := &Zone{Name: z.ZoneName, Members: addUnique(nil, ms), Principals: addUnique(nil, ps)}
		if z.ZoneType != nil {
			nz.Type = *z.ZoneType
		}
		tx.zones[z.ZoneName] = nz
	}
	for _, c := range d.Cfg {
		p := "/cfg/" + c.CfgName
		if !nameRE.MatchString(c.CfgName) {
			return invalidValue(p, "Invalid cfg name %q", c.CfgName)
		}
		var zs []string
		if c.MemberZone != nil {
			zs = c.MemberZone.ZoneName
		}
		for _, zn := range zs {
			if tx.zones[zn] == nil {
				return opFailed(p, "Zone %s does not exist", zn)
			}
		}
		if cur := tx.cfgs[c.CfgName]; cur != nil {
			cur.Zones = addUnique(cur.Zones, zs)
		} else {
			if len(zs) == 0 {
				return opFailed(p, "Cfg %s must have at least one member zone", c.CfgName)
			}
			tx.cfgs[c.CfgName] = &Cfg{Name: c.CfgName, Zones: addUnique(nil, zs)}
		}
	}
	return nil
}

func patchDefined(tx *zoneDB, d *wireDefined) *apiError {
	for _, z := range d.Zone {
		p := "/zone/" + z.ZoneName
		cur := tx.zones[z.ZoneName]
		if cur == nil {
			return opFailed(p, "Zone %s does not exist", z.ZoneName)
		}
		if z.MemberEntry == nil {
			continue
		}
		ms, err := normList(p, z.MemberEntry.EntryName, true)
		if err != nil {
			return err
		}
		ps, err := normList(p, z.MemberEntry.PrincipalEntryName, true)
		if err != nil {
			return err
		}
		if len(ms)+len(ps) == 0 {
			return opFailed(p, "Zone %s must have at least one member", z.ZoneName)
		}
		cur.Members, cur.Principals = addUnique(nil, ms), addUnique(nil, ps)
	}
	for _, a := range d.Alias {
		p := "/alias/" + a.AliasName
		cur := tx.aliases[a.AliasName]
		if cur == nil {
			return opFailed(p, "Alias %s does not exist", a.AliasName)
		}
		if a.MemberEntry == nil {
			continue
		}
		ms, err := normList(p, a.MemberEntry.AliasEntryName, false)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return opFailed(p, "Alias %s must have at least one member", a.AliasName)
		}
		cur.Members = addUnique(nil, ms)
	}
	for _, c := range d.Cfg {
		p := "/cfg/" + c.CfgName
		cur := tx.cfgs[c.CfgName]
		if cur == nil {
			return opFailed(p, "Cfg %s does not exist", c.CfgName)
		}
		if c.MemberZone == nil {
			continue
		}
		for _, zn := range c.MemberZone.ZoneName {
			if tx.zones[zn] == nil {
				return opFailed(p, "Zone %s does not exist", zn)
			}
		}
		cur.Zones = addUnique(nil, c.MemberZone.ZoneName)
	}
	return nil
}

func removeAll(p, owner string, list, rm []string) ([]string, *apiError) {
	for _, m := range rm {
		i := slices.Index(list, m)
		if i < 0 {
			return nil, opFailed(p, "%s is not a member of %s", m, owner)
		}
		list = slices.Delete(slices.Clone(list), i, i+1)
	}
	return list, nil
}

func deleteDefined(tx *zoneDB, d *wireDefined) *apiError {
	for _, c := range d.Cfg {
		p := "/cfg/" + c.CfgName
		cur := tx.cfgs[c.CfgName]
		if cur == nil {
			return opFailed(p, "Cfg %s does not exist", c.CfgName)
		}
		if c.MemberZone == nil || len(c.MemberZone.ZoneName) == 0 {
			delete(tx.cfgs, c.CfgName)
			continue
		}
		zs, err := removeAll(p, c.CfgName, cur.Zones, c.MemberZone.ZoneName)
		if err != nil {
			return err
		}
		if len(zs) == 0 {
			return opFailed(p, "Cfg %s would have no member zone; delete the cfg instead", c.CfgName)
		}
		cur.Zones = zs
	}
	for _, z := range d.Zone {
		p := "/zone/" + z.ZoneName
		cur := tx.zones[z.ZoneName]
		if cur == nil {
			return opFailed(p, "Zone %s does not exist", z.ZoneName)
		}
		if z.MemberEntry == nil || len(z.MemberEntry.EntryName)+len(z.MemberEntry.PrincipalEntryName) == 0 {
			for _, c := range tx.cfgs {
				if slices.Contains(c.Zones, z.ZoneName) {
					return opFailed(p, "Zone %s is a member of cfg %s", z.ZoneName, c.Name)
				}
			}
			delete(tx.zones, z.ZoneName)
			continue
		}
		ms, err := normList(p, z.MemberEntry.EntryName, true)
		if err != nil {
			return err
		}
		ps, err := normList(p, z.MemberEntry.PrincipalEntryName, true)
		if err != nil {
			return err
		}
		nm, err := removeAll(p, z.ZoneName, cur.Members, ms)
		if err != nil {
			return err
		}
		np, err := removeAll(p, z.ZoneName, cur.Principals, ps)
		if err != nil {
			return err
		}
		if len(nm)+len(np) == 0 {
			return opFailed(p, "Zone %s would have no members; delete the zone instead", z.ZoneName)
		}
		cur.Members, cur.Principals = nm, np
	}
	for _, a := range d.Alias {
		p := "/alias/" + a.AliasName
		cur := tx.aliases[a.AliasName]
		if cur == nil {
			return opFailed(p, "Alias %s does not exist", a.AliasName)
		}
		if a.MemberEntry == nil || len(a.MemberEntry.AliasEntryName) == 0 {
			delete(tx.aliases, a.AliasName)
			continue
		}
		ms, err := normList(p, a.MemberEntry.AliasEntryName, false)
		if err != nil {
			return err
		}
		nm, err := removeAll(p, a.AliasName, cur.Members, ms)
		if err != nil {
			return err
		}
		if len(nm) == 0 {
			return opFailed(p, "Alias %s would have no members; delete the alias instead", a.AliasName)
		}
		cur.Members = nm
	}
	return nil
}

func (f *Fabric) effectiveWire(s *session) wireEffective {
	f.applyPendingLocked()
	w := wireEffective{
		Checksum:               strp(f.checksum),
		CfgAction:              intp(0),
		DefaultZoneAccess:      intp(f.defaultAcc),
		DBMax:                  intp(dbMax),
		DBCommitted:            intp(f.committed.size()),
		DBChassisWideCommitted: intp(f.committed.size()),
		DBTransaction:          intp(0),
		TransactionToken:       intp(0),
	}
	w.DBAvail = intp(dbMax - f.committed.size())
	if s.tx != nil {
		w.DBTransaction = intp(s.tx.size())
		w.TransactionToken = intp(s.tok)
	}
	if f.effCfg != "" {
		w.CfgName = strp(f.effCfg)
		for i := range f.effZones {
			w.EnabledZone = append(w.EnabledZone, toWireZone(&f.effZones[i]))
		}
	}
	return w
}

func (f *Fabric) serveEffective(s *session, method, sub string, body []byte) (any, *apiError) {
	const base = "/brocade-zone:effective-configuration"
	if method == http.MethodGet {
		w := f.effectiveWire(s)
		if sub == "" {
			return map[string]any{"effective-configuration": w}, nil
		}
		// A single leaf, e.g. effective-configuration/checksum.
		b, _ := json.Marshal(w)
		var m map[string]any
		json.Unmarshal(b, &m)
		v, ok := m[sub]
		if !ok {
			return nil, &apiError{status: http.StatusNotFound, tag: "invalid-value", msg: "Invalid resource: effective-configuration/" + sub}
		}
		return map[string]any{sub: v}, nil
	}
	if method != http.MethodPatch || sub != "" {
		return nil, &apiError{status: http.StatusMethodNotAllowed, tag: "operation-not-supported", msg: "only GET and PATCH are supported on effective-configuration"}
	}
	var req struct {
		E *wireEffective `json:"effective-configuration"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.E == nil {
		return nil, &apiError{status: http.StatusBadRequest, tag: "malformed-message", msg: "Invalid request body: expected {\"effective-configuration\":{...}}", path: base}
	}
	e := req.E
	action := 0
	if e.CfgAction != nil {
		action = *e.CfgAction
	}
	switch {
	case action == actionAbort:
		if s.tx == nil {
			return nil, opFailed(base, "No outstanding zoning transaction to abort")
		}
		s.tx = nil
		f.stats.Aborts++
		return nil, nil
	case action == actionClear:
		f.openTx(s)
		s.tx = newZoneDB()
		return nil, nil
	case action != 0 && action != actionSave && action != actionDisable:
		return nil, invalidValue(base+"/cfg-action", "Invalid cfg-action %d", action)
	}
	if action == 0 && e.CfgName == nil && e.DefaultZoneAccess == nil {
		return nil, opFailed(base, "Nothing to do: give cfg-name, cfg-action or default-zone-access")
	}
	if e.Checksum == nil || *e.Checksum == "" {
		return nil, opFailed(base+"/checksum", "Checksum is required for this operation")
	}
	// Another administrator commits from a different session just now.
	if f.faults.ConcurrentChanges != 0 {
		if f.faults.ConcurrentChanges > 0 {
			f.faults.ConcurrentChanges--
		}
		f.adminChangeLocked()
	}
	if *e.Checksum != f.checksum || (s.tx != nil && s.base != f.checksum) {
		f.stats.Conflicts++
		// FOS aborts the stale transaction: the caller must read again.
		s.tx = nil
		return nil, opFailed(base+"/checksum", "Checksum mismatch: the zone database was changed by another transaction; the transaction was aborted")
	}
	db := f.view(s)
	switch {
	case action == actionSave:
		f.commitLocked(db)
		f.stats.Saves++
	case action == actionDisable:
		f.commitLocked(db)
		f.setEffectiveLocked("", nil)
	case e.CfgName != nil:
		if db.cfgs[*e.CfgName] == nil {
			return nil, opFailed(base+"/cfg-name", "Cfg %s does not exist", *e.CfgName)
		}
		f.commitLocked(db)
		f.stats.Enables++
		f.setEffectiveLocked(*e.CfgName, db.resolve(*e.CfgName))
	}
	if e.DefaultZoneAccess != nil {
		if a := *e.DefaultZoneAccess; a != 0 && a != 1 {
			return nil, invalidValue(base+"/default-zone-access", "Invalid default-zone-access %d", a)
		}
		if action == 0 && e.CfgName == nil {
			f.commitLocked(db)
		}
		f.defaultAcc = *e.DefaultZoneAccess
	}
	s.tx = nil
	return nil, nil
}
