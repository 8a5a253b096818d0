package san

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// How fencing by zoning remembers what it removed.
//
// Off takes the target's members out of every zone of the defined
// configuration and, in the same zoning transaction, writes them into a
// record zone on the switch itself:
//
//	fenced_<T>_<Z>    members removed from zone Z's member list
//	fenced_<T>_<Z>p   members removed from peer zone Z's principal list
//
// where <T> is 8 hex digits of SHA-256 of the target (its normalised plug)
// and <Z> 8 hex digits of SHA-256 of Z's name. Record zones are in no cfg,
// so they grant no access; they are visible to the administrator in
// `zoneshow`, survive the fencing node's death, and commit or fail together
// with the removal itself, so any node can unfence. On puts each record's
// members back into its zone and deletes the record.

var (
	wwnRE    = regexp.MustCompile(`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){7}$`)
	aliasRE  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_$^-]{0,63}$`)
	recordRE = regexp.MustCompile(`^fenced_[0-9a-f]{8}_[0-9a-f]{8}p?$`)
)

func normWWN(m string) string {
	if wwnRE.MatchString(m) {
		return strings.ToLower(m)
	}
	return m
}

func isWWN(m string) bool { return wwnRE.MatchString(m) }

func short(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

// target is what is fenced: the node's WWPNs and/or alias names.
type target struct {
	wwns    map[string]bool
	aliases map[string]bool
	plug    string // normalised, sorted, comma-separated
	prefix  string // "fenced_<T>_"
}

// parsePlug reads the plug parameter: WWPNs and alias names separated by
// commas (or spaces or semicolons).
func parsePlug(plug string) (*target, error) {
	t := &target{wwns: map[string]bool{}, aliases: map[string]bool{}}
	fields := strings.FieldsFunc(plug, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == '\t' })
	if len(fields) == 0 {
		return nil, fmt.Errorf("parameter plug: no WWPN or alias given")
	}
	var norm []string
	for _, f := range fields {
		switch {
		case isWWN(f):
			f = strings.ToLower(f)
			t.wwns[f] = true
		case aliasRE.MatchString(f):
			t.aliases[f] = true
		default:
			return nil, fmt.Errorf("parameter plug: %q is neither a WWPN (xx:xx:xx:xx:xx:xx:xx:xx) nor an alias name", f)
		}
		if !slices.Contains(norm, f) {
			norm = append(norm, f)
		}
	}
	sort.Strings(norm)
	t.plug = strings.Join(norm, ",")
	t.prefix = "fenced_" + short(t.plug) + "_"
	return t, nil
}

func (t *target) recordName(zoneName string, principal bool) string {
	n := t.prefix + short(zoneName)
	if principal {
		n += "p"
	}
	return n
}

// resolve returns the WWPNs the target stands for: those given plus the
// members of the aliases given.
func (t *target) resolve(db *zoneDB) (map[string]bool, error) {
	out := map[string]bool{}
	for w := range t.wwns {
		out[w] = true
	}
	for a := range t.aliases {
		ms, ok := db.aliases[a]
		if !ok {
			return nil, fmt.Errorf("plug alias %s is not defined on the switch", a)
		}
		for _, m := range ms {
			if isWWN(m) {
				out[strings.ToLower(m)] = true
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("plug %s resolves to no WWPN", t.plug)
	}
	return out, nil
}

// matches reports whether zone member m stands for the target: one of its
// WWPNs, one of its aliases, or an alias made only of its WWPNs. An alias
// that mixes the target's WWPNs with others cannot be cut exactly, so it is
// an error rather than a silent miss.
func (t *target) matches(db *zoneDB, wwns map[string]bool, m string) (bool, error) {
	if isWWN(m) {
		return wwns[strings.ToLower(m)], nil
	}
	if t.aliases[m] {
		return true, nil
	}
	ms, ok := db.aliases[m]
	if !ok || len(ms) == 0 {
		return false, nil // domain,port members, or an unknown name
	}
	in := 0
	for _, x := range ms {
		if wwns[strings.ToLower(x)] {
			in++
		}
	}
	switch in {
	case 0:
		return false, nil
	case len(ms):
		return true, nil
	}
	return false, fmt.Errorf("alias %s holds some of the target's WWPNs and other WWPNs too; fence by that alias or split it", m)
}

// change is a set of members to add to or remove from one zone's member
// list (or principal list).
type change struct {
	zone      string
	principal bool
	members   []string
}

// planOff computes which members to remove from which zones, and what to
// add to the record zones.
func planOff(db *zoneDB, t *target, wwns map[string]bool) (removals, records []change, err error) {
	for _, name := range sortedZoneNames(db) {
		if recordRE.MatchString(name) {
			continue
		}
		z := db.zones[name]
		total, removed := len(z.members)+len(z.principals), 0
		for _, side := range []struct {
			principal bool
			list      []string
		}{{false, z.members}, {true, z.principals}} {
			var hit []string
			for _, m := range side.list {
				ok, err := t.matches(db, wwns, m)
				if err != nil {
					return nil, nil, fmt.Errorf("zone %s: %w", name, err)
				}
				if ok {
					hit = append(hit, m)
				}
			}
			if len(hit) == 0 {
				continue
			}
			removed += len(hit)
			removals = append(removals, change{zone: name, principal: side.principal, members: hit})
			rec := t.recordName(name, side.principal)
			var have []string
			if r, ok := db.zones[rec]; ok {
				have = r.members
			}
			var add []string
			for _, m := range hit {
				if !slices.Contains(have, m) {
					add = append(add, m)
				}
			}
			if len(add) > 0 {
				records = append(records, change{zone: rec, members: add})
			}
		}
		if removed > 0 && removed == total {
			return nil, nil, fmt.Errorf("zone %s has only the target's members; cutting them would leave it empty: remove the zone from the cfg by hand or add a target port", name)
		}
	}
	return removals, records, nil
}

// planOn computes what to put back from the target's record zones, which
// record zones to delete, and which records have lost their zone.
func planOn(db *zoneDB, t *target) (restores []change, deletes []string, orphans []string) {
	byRecord := map[string]change{}
	for _, name := range sortedZoneNames(db) {
		if recordRE.MatchString(name) {
			continue
		}
		for _, p := range []bool{false, true} {
			byRecord[t.recordName(name, p)] = change{zone: name, principal: p}
		}
	}
	for _, rec := range sortedZoneNames(db) {
		if !strings.HasPrefix(rec, t.prefix) || !recordRE.MatchString(rec) {
			continue
		}
		orig, ok := byRecord[rec]
		if !ok {
			orphans = append(orphans, rec)
			continue
		}
		z := db.zones[orig.zone]
		cur := z.members
		if orig.principal {
			cur = z.principals
		}
		for _, m := range db.zones[rec].members {
			if !slices.Contains(cur, m) {
				orig.members = append(orig.members, m)
			}
		}
		if len(orig.members) > 0 {
			restores = append(restores, orig)
		}
		deletes = append(deletes, rec)
	}
	return restores, deletes, orphans
}

func sortedZoneNames(db *zoneDB) []string {
	names := make([]string, 0, len(db.zones))
	for n := range db.zones {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// present returns which of wwns the effective configuration grants access
// to through its enabled zones.
func present(e *effective, wwns map[string]bool) []string {
	seen := map[string]bool{}
	for _, z := range e.zones {
		for _, m := range append(slices.Clone(z.members), z.principals...) {
			if w := strings.ToLower(m); wwns[w] {
				seen[w] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for w := range seen {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// openAccess reports whether, with no cfg enabled, the fabric's default
// zone lets every device see every other.
func openAccess(e *effective) bool { return e.cfgName == "" && e.defaultAccess == 1 }
