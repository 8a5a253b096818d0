package fabricsim

// JSON shapes of the brocade-zone YANG module as FOS REST sends them.

type wireMemberEntry struct {
	EntryName          []string `json:"entry-name,omitempty"`
	PrincipalEntryName []string `json:"principal-entry-name,omitempty"`
}

type wireZone struct {
	ZoneName    string           `json:"zone-name"`
	ZoneType    *int             `json:"zone-type,omitempty"`
	MemberEntry *wireMemberEntry `json:"member-entry,omitempty"`
}

type wireAliasEntry struct {
	AliasEntryName []string `json:"alias-entry-name,omitempty"`
}

type wireAlias struct {
	AliasName   string          `json:"alias-name"`
	MemberEntry *wireAliasEntry `json:"member-entry,omitempty"`
}

type wireMemberZone struct {
	ZoneName []string `json:"zone-name,omitempty"`
}

type wireCfg struct {
	CfgName    string          `json:"cfg-name"`
	MemberZone *wireMemberZone `json:"member-zone,omitempty"`
}

type wireDefined struct {
	Cfg   []wireCfg   `json:"cfg,omitempty"`
	Zone  []wireZone  `json:"zone,omitempty"`
	Alias []wireAlias `json:"alias,omitempty"`
}

type wireEffective struct {
	CfgName                *string    `json:"cfg-name,omitempty"`
	Checksum               *string    `json:"checksum,omitempty"`
	CfgAction              *int       `json:"cfg-action,omitempty"`
	DefaultZoneAccess      *int       `json:"default-zone-access,omitempty"`
	DBMax                  *int       `json:"db-max,omitempty"`
	DBAvail                *int       `json:"db-avail,omitempty"`
	DBCommitted            *int       `json:"db-committed,omitempty"`
	DBTransaction          *int       `json:"db-transaction,omitempty"`
	TransactionToken       *int       `json:"transaction-token,omitempty"`
	DBChassisWideCommitted *int       `json:"db-chassis-wide-committed,omitempty"`
	EnabledZone            []wireZone `json:"enabled-zone,omitempty"`
}

type wireError struct {
	ErrorType    string         `json:"error-type"`
	ErrorTag     string         `json:"error-tag"`
	ErrorAppTag  string         `json:"error-app-tag,omitempty"`
	ErrorPath    string         `json:"error-path,omitempty"`
	ErrorMessage string         `json:"error-message"`
	ErrorInfo    map[string]any `json:"error-info,omitempty"`
}

type wireErrors struct {
	Errors struct {
		Error []wireError `json:"error"`
	} `json:"errors"`
}

func intp(i int) *int       { return &i }
func strp(s string) *string { return &s }

func toWireZone(z *Zone) wireZone {
	w := wireZone{ZoneName: z.Name, ZoneType: intp(z.Type)}
	if len(z.Members)+len(z.Principals) > 0 {
		w.MemberEntry = &wireMemberEntry{EntryName: z.Members, PrincipalEntryName: z.Principals}
	}
	return w
}

func (d *zoneDB) toWire() wireDefined {
	var w wireDefined
	for _, n := range sortedKeys(d.cfgs) {
		c := d.cfgs[n]
		w.Cfg = append(w.Cfg, wireCfg{CfgName: c.Name, MemberZone: &wireMemberZone{ZoneName: c.Zones}})
	}
	for _, n := range sortedKeys(d.zones) {
		w.Zone = append(w.Zone, toWireZone(d.zones[n]))
	}
	for _, n := range sortedKeys(d.aliases) {
		a := d.aliases[n]
		w.Alias = append(w.Alias, wireAlias{AliasName: a.Name, MemberEntry: &wireAliasEntry{AliasEntryName: a.Members}})
	}
	return w
}
