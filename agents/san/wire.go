package san

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The brocade-zone YANG module as FOS REST sends it. Decoding is lenient
// where switches differ: a list with one element may come as an object, a
// leaf-list with one entry as a string, and integers as strings.

// list decodes a JSON array of T, or a single T object.
type list[T any] []T

func (l *list[T]) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*l = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var s []T
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*l = s
		return nil
	}
	var one T
	if err := json.Unmarshal(b, &one); err != nil {
		return err
	}
	*l = []T{one}
	return nil
}

// flexInt decodes 1 or "1".
type flexInt int

func (n *flexInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("not an integer: %.40q", s)
	}
	*n = flexInt(v)
	return nil
}

type memberEntry struct {
	EntryName          list[string] `json:"entry-name,omitempty"`
	PrincipalEntryName list[string] `json:"principal-entry-name,omitempty"`
}

type zoneJSON struct {
	ZoneName    string       `json:"zone-name"`
	ZoneType    *flexInt     `json:"zone-type,omitempty"`
	MemberEntry *memberEntry `json:"member-entry,omitempty"`
}

type aliasJSON struct {
	AliasName   string `json:"alias-name"`
	MemberEntry *struct {
		AliasEntryName list[string] `json:"alias-entry-name,omitempty"`
	} `json:"member-entry,omitempty"`
}

type cfgJSON struct {
	CfgName    string `json:"cfg-name"`
	MemberZone *struct {
		ZoneName list[string] `json:"zone-name,omitempty"`
	} `json:"member-zone,omitempty"`
}

type definedJSON struct {
	Cfg   list[cfgJSON]   `json:"cfg,omitempty"`
	Zone  list[zoneJSON]  `json:"zone,omitempty"`
	Alias list[aliasJSON] `json:"alias,omitempty"`
}

type effectiveJSON struct {
	CfgName           string         `json:"cfg-name"`
	Checksum          string         `json:"checksum"`
	DefaultZoneAccess *flexInt       `json:"default-zone-access"`
	EnabledZone       list[zoneJSON] `json:"enabled-zone"`
}

// fosErrors is the RESTCONF error document FOS answers with.
type fosErrors struct {
	Errors struct {
		Error list[struct {
			ErrorType    string `json:"error-type"`
			ErrorTag     string `json:"error-tag"`
			ErrorPath    string `json:"error-path"`
			ErrorMessage string `json:"error-message"`
		}] `json:"error"`
	} `json:"errors"`
}

// zoneDB is the defined configuration as the planner needs it.
type zoneDB struct {
	zones   map[string]zone
	aliases map[string][]string
	cfgs    map[string][]string
}

type zone struct {
	name       string
	typ        int
	members    []string
	principals []string
}

// parseDefined decodes a GET defined-configuration answer.
func parseDefined(b []byte) (*zoneDB, error) {
	var r struct {
		Response *struct {
			Defined *definedJSON `json:"defined-configuration"`
		} `json:"Response"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("defined-configuration: %w", err)
	}
	if r.Response == nil {
		return nil, fmt.Errorf("defined-configuration: no \"Response\" in the answer")
	}
	db := &zoneDB{zones: map[string]zone{}, aliases: map[string][]string{}, cfgs: map[string][]string{}}
	d := r.Response.Defined
	if d == nil {
		return db, nil // an empty zoning database
	}
	for _, z := range d.Zone {
		if z.ZoneName == "" {
			return nil, fmt.Errorf("defined-configuration: zone without zone-name")
		}
		db.zones[z.ZoneName] = toZone(z)
	}
	for _, a := range d.Alias {
		if a.AliasName == "" {
			return nil, fmt.Errorf("defined-configuration: alias without alias-name")
		}
		var ms []string
		if a.MemberEntry != nil {
			for _, m := range a.MemberEntry.AliasEntryName {
				ms = append(ms, normWWN(m))
			}
		}
		db.aliases[a.AliasName] = ms
	}
	for _, c := range d.Cfg {
		if c.CfgName == "" {
			return nil, fmt.Errorf("defined-configuration: cfg without cfg-name")
		}
		var zs []string
		if c.MemberZone != nil {
			zs = c.MemberZone.ZoneName
		}
		db.cfgs[c.CfgName] = zs
	}
	return db, nil
}

func toZone(z zoneJSON) zone {
	out := zone{name: z.ZoneName}
	if z.ZoneType != nil {
		out.typ = int(*z.ZoneType)
	}
	if z.MemberEntry != nil {
		out.members = []string(z.MemberEntry.EntryName)
		out.principals = []string(z.MemberEntry.PrincipalEntryName)
	}
	return out
}

// effective is the effective configuration as read back.
type effective struct {
	cfgName       string
	checksum      string
	defaultAccess int // 1 all access, 0 no access
	zones         []zone
}

// parseEffective decodes a GET effective-configuration answer.
func parseEffective(b []byte) (*effective, error) {
	var r struct {
		Response *struct {
			Effective *effectiveJSON `json:"effective-configuration"`
		} `json:"Response"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("effective-configuration: %w", err)
	}
	if r.Response == nil || r.Response.Effective == nil {
		return nil, fmt.Errorf("effective-configuration: no \"Response\".\"effective-configuration\" in the answer")
	}
	e := r.Response.Effective
	if e.Checksum == "" {
		return nil, fmt.Errorf("effective-configuration: no checksum in the answer")
	}
	out := &effective{cfgName: e.CfgName, checksum: e.Checksum, defaultAccess: 1}
	if e.DefaultZoneAccess != nil {
		out.defaultAccess = int(*e.DefaultZoneAccess)
	}
	for _, z := range e.EnabledZone {
		out.zones = append(out.zones, toZone(z))
	}
	return out, nil
}

// parseFOSError returns the first error-message of a FOS error document, or
// "" when b is not one.
func parseFOSError(b []byte) string {
	var e fosErrors
	if json.Unmarshal(b, &e) != nil || len(e.Errors.Error) == 0 {
		return ""
	}
	var msgs []string
	for _, x := range e.Errors.Error {
		m := x.ErrorMessage
		if m == "" {
			m = x.ErrorTag
		}
		if x.ErrorPath != "" {
			m += " (" + x.ErrorPath + ")"
		}
		msgs = append(msgs, m)
	}
	return strings.Join(msgs, "; ")
}
