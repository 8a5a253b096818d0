// Package fabricsim simulates the zoning part of a Brocade Fabric OS switch's
// REST API (FOS 8.2+/9.x, RESTCONF with YANG-derived JSON) so the san agent
// can be tested against real HTTP on loopback.
//
// What it models, after the Brocade FOS REST API Reference:
//   - POST /rest/login with Basic credentials answers an Authorization
//     session token in a response header; POST /rest/logout ends the session
//     and aborts its zoning transaction.
//   - /rest/running/brocade-zone/defined-configuration (also the older
//     /rest/running/zoning/... path): GET; POST creates zones, aliases and cfgs
//     or adds members to existing ones; PATCH replaces members; DELETE removes
//     the members given, or the whole object when no members are given.
//   - Every change goes into a transaction buffer owned by the session; it
//     becomes the defined configuration only on save (cfg-action 1) or enable
//     (cfg-name), both of which must carry the current checksum of the
//     committed database. A stale checksum, or a transaction opened before
//     another session committed, is refused: "checksum mismatch".
//   - /rest/running/brocade-zone/effective-configuration: the enabled cfg
//     with its zones resolved (aliases expanded to WWNs), the checksum,
//     default-zone-access, the db-* sizes and transaction-token.
//     cfg-action 2 disables, 3 clears, 4 aborts the transaction.
//   - Errors as RESTCONF: {"errors":{"error":[{"error-type","error-tag",
//     "error-message",...}]}}.
//
// Fault knobs (Faults) make it misbehave the way fabrics do: another
// administrator commits between our read and our save, an enable that is
// accepted but never reaches the effective configuration, a slow
// propagation, 5xx answers and latency.
package fabricsim

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Zone is a zone of the defined configuration. Principals are the principal
// members of a peer zone (zone-type 1).
type Zone struct {
	Name       string   `json:"name"`
	Type       int      `json:"type,omitempty"`
	Members    []string `json:"members,omitempty"`
	Principals []string `json:"principals,omitempty"`
}

// Alias names a list of WWNs or domain,port entries.
type Alias struct {
	Name    string   `json:"name"`
	Members []string `json:"members"`
}

// Cfg is a zone configuration: a named list of zones.
type Cfg struct {
	Name  string   `json:"name"`
	Zones []string `json:"zones"`
}

// Zoning is a whole zoning database plus what is enabled: the simulator's
// initial state, also loadable from JSON by `fenced-lab sim san --zoning FILE`.
type Zoning struct {
	Zones   []Zone  `json:"zones"`
	Aliases []Alias `json:"aliases,omitempty"`
	Cfgs    []Cfg   `json:"cfgs"`
	// Enabled is the cfg to enable at start ("" for none).
	Enabled string `json:"enabled,omitempty"`
	// DefaultZoneAccess is 1 (all access) or 0 (no access) when no cfg is
	// enabled; FOS calls it default-zone-access.
	DefaultZoneAccess int `json:"default_zone_access"`
}

// zoneDB is the defined configuration; maps are keyed by name.
type zoneDB struct {
	zones   map[string]*Zone
	aliases map[string]*Alias
	cfgs    map[string]*Cfg
}

func newZoneDB() *zoneDB {
	return &zoneDB{zones: map[string]*Zone{}, aliases: map[string]*Alias{}, cfgs: map[string]*Cfg{}}
}

func (d *zoneDB) clone() *zoneDB {
	c := newZoneDB()
	for k, z := range d.zones {
		c.zones[k] = &Zone{Name: z.Name, Type: z.Type, Members: slices.Clone(z.Members), Principals: slices.Clone(z.Principals)}
	}
	for k, a := range d.aliases {
		c.aliases[k] = &Alias{Name: a.Name, Members: slices.Clone(a.Members)}
	}
	for k, g := range d.cfgs {
		c.cfgs[k] = &Cfg{Name: g.Name, Zones: slices.Clone(g.Zones)}
	}
	return c
}

// canonical is a stable serialisation, the input of the checksum.
func (d *zoneDB) canonical() []byte {
	var z Zoning
	for _, n := range sortedKeys(d.zones) {
		z.Zones = append(z.Zones, *d.zones[n])
	}
	for _, n := range sortedKeys(d.aliases) {
		z.Aliases = append(z.Aliases, *d.aliases[n])
	}
	for _, n := range sortedKeys(d.cfgs) {
		z.Cfgs = append(z.Cfgs, *d.cfgs[n])
	}
	b, _ := json.Marshal(z)
	return b
}

// size approximates FOS's db-committed byte count.
func (d *zoneDB) size() int { return len(d.canonical()) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_$^-]{0,63}$`)
	wwnRE  = regexp.MustCompile(`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){7}$`)
	dpRE   = regexp.MustCompile(`^[0-9]{1,3},[0-9]{1,5}$`)
)

// normMember returns a zone member in FOS's stored form (WWNs lower case) or
// an error naming what is wrong with it.
func normMember(m string) (string, error) {
	switch {
	case wwnRE.MatchString(m):
		return strings.ToLower(m), nil
	case dpRE.MatchString(m), nameRE.MatchString(m):
		return m, nil
	}
	return "", fmt.Errorf("invalid member %q: not a WWN, domain,port or alias name", m)
}

func isAliasName(m string) bool { return !wwnRE.MatchString(m) && !dpRE.MatchString(m) }

// fromZoning builds a database from z, validating names and references.
func fromZoning(z Zoning) (*zoneDB, error) {
	d := newZoneDB()
	for _, a := range z.Aliases {
		if !nameRE.MatchString(a.Name) || len(a.Members) == 0 {
			return nil, fmt.Errorf("alias %q: invalid name or no members", a.Name)
		}
		var ms []string
		for _, m := range a.Members {
			n, err := normMember(m)
			if err != nil || isAliasName(n) {
				return nil, fmt.Errorf("alias %s: invalid member %q", a.Name, m)
			}
			ms = append(ms, n)
		}
		d.aliases[a.Name] = &Alias{Name: a.Name, Members: ms}
	}
	for _, zn := range z.Zones {
		if !nameRE.MatchString(zn.Name) || len(zn.Members)+len(zn.Principals) == 0 {
			return nil, fmt.Errorf("zone %q: invalid name or no members", zn.Name)
		}
		nz := &Zone{Name: zn.Name, Type: zn.Type}
		for _, list := range []struct {
			in  []string
			out *[]string
		}{{zn.Members, &nz.Members}, {zn.Principals, &nz.Principals}} {
			for _, m := range list.in {
				n, err := normMember(m)
				if err != nil {
					return nil, fmt.Errorf("zone %s: %w", zn.Name, err)
				}
				*list.out = append(*list.out, n)
			}
		}
		d.zones[zn.Name] = nz
	}
	for _, c := range z.Cfgs {
		if !nameRE.MatchString(c.Name) {
			return nil, fmt.Errorf("cfg %q: invalid name", c.Name)
		}
		for _, zn := range c.Zones {
			if d.zones[zn] == nil {
				return nil, fmt.Errorf("cfg %s: zone %q not defined", c.Name, zn)
			}
		}
		d.cfgs[c.Name] = &Cfg{Name: c.Name, Zones: slices.Clone(c.Zones)}
	}
	if z.Enabled != "" && d.cfgs[z.Enabled] == nil {
		return nil, fmt.Errorf("enabled cfg %q not defined", z.Enabled)
	}
	return d, nil
}

// resolve expands cfg into its enabled zones as the effective configuration
// shows them: aliases replaced by their WWNs.
func (d *zoneDB) resolve(cfg string) []Zone {
	c := d.cfgs[cfg]
	if c == nil {
		return nil
	}
	expand := func(ms []string) []string {
		var out []string
		for _, m := range ms {
			if a := d.aliases[m]; a != nil {
				out = append(out, a.Members...)
			} else if !isAliasName(m) {
				out = append(out, m)
			}
		}
		return out
	}
	var zones []Zone
	for _, zn := range c.Zones {
		z := d.zones[zn]
		if z == nil {
			continue
		}
		zones = append(zones, Zone{Name: z.Name, Type: z.Type, Members: expand(z.Members), Principals: expand(z.Principals)})
	}
	return zones
}

// checksumOf is the database checksum; gen makes it change on every commit
// even when the content comes back to an earlier state, as FOS's does.
func checksumOf(d *zoneDB, gen uint64) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\n", gen)
	h.Write(d.canonical())
	return fmt.Sprintf("%x", h.Sum(nil))[:32]
}
