package redfishsim

import (
	"encoding/json"
	"strings"
)

// Link names one kind of link the simulator hands out, for
// Faults.ForeignLinks.
type Link string

// The links a client follows to fence a system.
const (
	LinkSystems         Link = "systems"          // service root: Systems.@odata.id
	LinkSessions        Link = "sessions"         // service root: Links.Sessions.@odata.id
	LinkMember          Link = "member"           // Systems collection: Members[].@odata.id
	LinkSystemID        Link = "system-id"        // ComputerSystem: its own @odata.id
	LinkReset           Link = "reset"            // ComputerSystem: #ComputerSystem.Reset target
	LinkActionInfo      Link = "action-info"      // ComputerSystem: #ComputerSystem.Reset @Redfish.ActionInfo (openbmc profile)
	LinkSessionLocation Link = "session-location" // Location header of a created session
	LinkTaskLocation    Link = "task-location"    // Location header of a 202 reset and of a running task monitor (openbmc profile)
)

// Links lists every Link, in the order a client meets them.
func Links() []Link {
	return []Link{LinkSystems, LinkSessions, LinkSessionLocation, LinkMember, LinkSystemID, LinkActionInfo, LinkReset, LinkTaskLocation}
}

// foreign returns link with the prefix configured for kind put in front of
// it, or link unchanged.
func foreign(f Faults, kind Link, link string) string {
	if p, ok := f.ForeignLinks[kind]; ok && link != "" {
		return p + link
	}
	return link
}

// withForeignLinks returns doc (served at uri) with the links of f's
// ForeignLinks rewritten; doc itself, shared with the profile, is not
// changed.
func withForeignLinks(f Faults, uri string, doc map[string]any, isSystem bool) map[string]any {
	if len(f.ForeignLinks) == 0 {
		return doc
	}
	doc = deepCopy(doc)
	setLink := func(kind Link, m map[string]any, key string) {
		if m == nil {
			return
		}
		if s, ok := m[key].(string); ok {
			m[key] = foreign(f, kind, s)
		}
	}
	switch {
	case uri == serviceRoot:
		sys, _ := doc["Systems"].(map[string]any)
		setLink(LinkSystems, sys, "@odata.id")
		links, _ := doc["Links"].(map[string]any)
		sess, _ := links["Sessions"].(map[string]any)
		setLink(LinkSessions, sess, "@odata.id")
	case uri == serviceRoot+"/Systems":
		members, _ := doc["Members"].([]any)
		for _, m := range members {
			mm, _ := m.(map[string]any)
			setLink(LinkMember, mm, "@odata.id")
		}
	case isSystem:
		setLink(LinkSystemID, doc, "@odata.id")
		actions, _ := doc["Actions"].(map[string]any)
		reset, _ := actions["#ComputerSystem.Reset"].(map[string]any)
		setLink(LinkReset, reset, "target")
		setLink(LinkActionInfo, reset, "@Redfish.ActionInfo")
	}
	return doc
}

func deepCopy(doc map[string]any) map[string]any {
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err) // documents are built from JSON: cannot fail
	}
	var out map[string]any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		panic(err)
	}
	return out
}
