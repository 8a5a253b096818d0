package redfishsim

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// The DMTF public-rackmount1 mockup (BSD-3-Clause, see mockups/LICENSE-DMTF.md),
// trimmed to the resources the simulator serves.
//
//go:embed mockups
var mockupFS embed.FS

const (
	mockupRoot  = "mockups/public-rackmount1"
	sushyUUID   = "c7a5fdbd-cdaf-9455-926a-d65c16db1809"
	serviceRoot = "/redfish/v1"
	dmtfSystem  = "/redfish/v1/Systems/437XR1138R2"
	dmtfManager = "/redfish/v1/Managers/BMC"
	dmtfChassis = "/redfish/v1/Chassis/1U"
)

// Profile names accepted by Options.Profile.
const (
	ProfileDMTF    = "dmtf"    // DMTF public-rackmount1 as published: Systems/437XR1138R2, 204 resets
	ProfileIDRAC   = "idrac"   // Dell iDRAC shape: Systems/System.Embedded.1, no GracefulRestart, 409 on redundant resets
	ProfileILO     = "ilo"     // HPE iLO shape: Systems/1, 200 with a Base.Success body, absolute session Location
	ProfileOpenBMC = "openbmc" // OpenBMC bmcweb shape: Systems/system, @Redfish.ActionInfo, 202 + task monitor
	ProfileMulti   = "multi"   // two systems behind one manager (a twin/blade chassis)

	// Quirk profiles: the DMTF tree with one behaviour of a BMC we did
	// not write, each as the agent meets it in the field.

	// ProfileSushy is OpenStack sushy-tools' shape: no SessionService
	// and no Links.Sessions (a login POST answers 404), Basic auth on
	// every request, errors as Base.1.0.GeneralError with the real
	// message only in error.message, a system named by its UUID.
	ProfileSushy = "sushy"
	// ProfileSlowOff reads PoweringOff for PowerOffDelay (default
	// SlowOffDelay) after a reset before it reads Off.
	ProfileSlowOff = "slow-off"
	// ProfilePushButton allows only PushPowerButton as ResetType: a
	// toggle, which powers on a system that is off.
	ProfilePushButton = "push-button"
	// ProfileSessionLimit has SessionLimit (default 2) session slots; a
	// login beyond them answers 503 Base.1.8.SessionLimitExceeded.
	ProfileSessionLimit = "session-limit"
	// ProfileSlowTask answers a reset with 202 and a task monitor whose
	// task reads Running for TaskDelay (default SlowTaskDelay), however
	// soon the power changed.
	ProfileSlowTask = "slow-task"
)

// The quirk profiles' defaults, for Options left zero.
const (
	SlowOffDelay        = 5 * time.Second
	SlowTaskDelay       = 30 * time.Second
	DefaultSessionLimit = 2
)

// Profiles lists the profile names, sorted.
func Profiles() []string {
	p := []string{ProfileDMTF, ProfileIDRAC, ProfileILO, ProfileOpenBMC, ProfileMulti,
		ProfileSushy, ProfileSlowOff, ProfilePushButton, ProfileSessionLimit, ProfileSlowTask}
	sort.Strings(p)
	return p
}

// ProfilePowerOffDelay is the PowerOffDelay the named profile uses when
// Options.PowerOffDelay is zero (0 for most: instant).
func ProfilePowerOffDelay(name string) time.Duration {
	if name == ProfileSlowOff {
		return SlowOffDelay
	}
	return 0
}

// profile is the shape of one simulated BMC.
type profile struct {
	name string
	// docs maps a resource URI (no trailing slash) to its JSON document.
	docs map[string]map[string]any
	// systems are the URIs of the ComputerSystems whose power we simulate.
	systems []string
	// resetStyle: "204" (no content), "200" (iLO body), "202" (task monitor).
	resetStyle string
	// conflictOnNoop answers 409 to ForceOff when already off (and On when on), as iDRAC does.
	conflictOnNoop bool
	// absoluteSessionLocation makes the session Location an absolute URL, as iLO does.
	absoluteSessionLocation bool
	// vendor is the Vendor property of the service root.
	vendor string
	// sessionless: no SessionService, no Links.Sessions, Basic auth only.
	sessionless bool
	// sushyErrors writes every error the way sushy-tools does: code and
	// the one ExtendedInfo MessageId are Base.1.0.GeneralError, and the
	// message says what happened.
	sushyErrors bool
	// Defaults for Options left zero.
	powerOffDelay, taskDelay time.Duration
	sessionLimit             int
}

// loadMockup reads the embedded mockup into a map of URI to document.
func loadMockup() (map[string]map[string]any, error) {
	docs := map[string]map[string]any{}
	err := fs.WalkDir(mockupFS, mockupRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || path.Base(p) != "index.json" {
			return nil
		}
		b, err := mockupFS.ReadFile(p)
		if err != nil {
			return err
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("mockup %s: %w", p, err)
		}
		rel := strings.TrimPrefix(path.Dir(p), mockupRoot)
		docs[serviceRoot+rel] = doc
		return nil
	})
	return docs, err
}

// renameURI rewrites every URI equal to from, or under from/, to the same
// place under to, in keys and in values.
func renameURI(docs map[string]map[string]any, from, to string) map[string]map[string]any {
	b, err := json.Marshal(docs)
	if err != nil {
		panic(err) // docs came from JSON: cannot fail
	}
	s := strings.ReplaceAll(string(b), `"`+from+`"`, `"`+to+`"`)
	s = strings.ReplaceAll(s, `"`+from+`/`, `"`+to+`/`)
	out := map[string]map[string]any{}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		panic(err)
	}
	return out
}

func setID(doc map[string]any, id, name string) {
	doc["Id"] = id
	if name != "" {
		doc["Name"] = name
	}
}

func resetAction(doc map[string]any) map[string]any {
	actions, _ := doc["Actions"].(map[string]any)
	if actions == nil {
		actions = map[string]any{}
		doc["Actions"] = actions
	}
	reset, _ := actions["#ComputerSystem.Reset"].(map[string]any)
	if reset == nil {
		reset = map[string]any{"target": doc["@odata.id"].(string) + "/Actions/ComputerSystem.Reset"}
		actions["#ComputerSystem.Reset"] = reset
	}
	return reset
}

func stringsToAny(v []string) []any {
	out := make([]any, len(v))
	for i, s := range v {
		out[i] = s
	}
	return out
}

// buildProfile returns the tree of the named profile.
func buildProfile(name string) (*profile, error) {
	docs, err := loadMockup()
	if err != nil {
		return nil, err
	}
	p := &profile{name: name, resetStyle: "204", vendor: "Contoso"}
	switch name {
	case ProfileDMTF, "":
		p.name = ProfileDMTF
		p.systems = []string{dmtfSystem}

	case ProfileIDRAC:
		sys := "/redfish/v1/Systems/System.Embedded.1"
		docs = renameURI(docs, dmtfSystem, sys)
		docs = renameURI(docs, dmtfManager, "/redfish/v1/Managers/iDRAC.Embedded.1")
		docs = renameURI(docs, dmtfChassis, "/redfish/v1/Chassis/System.Embedded.1")
		d := docs[sys]
		setID(d, "System.Embedded.1", "System")
		d["Manufacturer"] = "Dell Inc."
		d["Model"] = "PowerEdge R650"
		d["Oem"] = map[string]any{"Dell": map[string]any{"@odata.type": "#DellOem.v1_3_0.DellOemResources"}}
		// iDRAC 9 lists no GracefulRestart.
		resetAction(d)["ResetType@Redfish.AllowableValues"] = stringsToAny([]string{
			"On", "ForceOff", "ForceRestart", "GracefulShutdown", "PushPowerButton", "Nmi", "PowerCycle"})
		setID(docs["/redfish/v1/Managers/iDRAC.Embedded.1"], "iDRAC.Embedded.1", "Manager")
		setID(docs["/redfish/v1/Chassis/System.Embedded.1"], "System.Embedded.1", "Computer System Chassis")
		docs[serviceRoot]["Oem"] = map[string]any{"Dell": map[string]any{"@odata.type": "#DellServiceRoot.v1_0_0.DellServiceRoot", "IsBranded": 0}}
		p.systems = []string{sys}
		p.conflictOnNoop = true
		p.vendor = "Dell"

	case ProfileILO:
		sys := "/redfish/v1/Systems/1"
		docs = renameURI(docs, dmtfSystem, sys)
		docs = renameURI(docs, dmtfManager, "/redfish/v1/Managers/1")
		docs = renameURI(docs, dmtfChassis, "/redfish/v1/Chassis/1")
		d := docs[sys]
		setID(d, "1", "Computer System")
		d["Manufacturer"] = "HPE"
		d["Model"] = "ProLiant DL360 Gen10"
		d["Oem"] = map[string]any{"Hpe": map[string]any{"@odata.type": "#HpeComputerSystemExt.v2_10_1.HpeComputerSystemExt", "PostState": "FinishedPost"}}
		resetAction(d)["ResetType@Redfish.AllowableValues"] = stringsToAny([]string{
			"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "PushPowerButton", "GracefulRestart"})
		setID(docs["/redfish/v1/Managers/1"], "1", "Manager")
		setID(docs["/redfish/v1/Chassis/1"], "1", "Computer System Chassis")
		docs[serviceRoot]["Oem"] = map[string]any{"Hpe": map[string]any{"@odata.type": "#HpeiLOServiceExt.v2_3_0.HpeiLOServiceExt", "Manager": []any{map[string]any{"ManagerType": "iLO 5"}}}}
		p.systems = []string{sys}
		p.resetStyle = "200"
		p.absoluteSessionLocation = true
		p.vendor = "HPE"

	case ProfileOpenBMC:
		sys := "/redfish/v1/Systems/system"
		docs = renameURI(docs, dmtfSystem, sys)
		docs = renameURI(docs, dmtfManager, "/redfish/v1/Managers/bmc")
		docs = renameURI(docs, dmtfChassis, "/redfish/v1/Chassis/chassis")
		d := docs[sys]
		setID(d, "system", "system")
		d["Manufacturer"] = "OpenBMC"
		delete(d, "Oem")
		// bmcweb points at an ActionInfo instead of annotating the action.
		reset := resetAction(d)
		delete(reset, "ResetType@Redfish.AllowableValues")
		info := sys + "/ResetActionInfo"
		reset["@Redfish.ActionInfo"] = info
		docs[info] = map[string]any{
			"@odata.id":   info,
			"@odata.type": "#ActionInfo.v1_1_2.ActionInfo",
			"Id":          "ResetActionInfo",
			"Name":        "Reset Action Info",
			"Parameters": []any{map[string]any{
				"Name":     "ResetType",
				"Required": true,
				"DataType": "String",
				"AllowableValues": stringsToAny([]string{
					"ForceOff", "ForceOn", "ForceRestart", "GracefulRestart", "GracefulShutdown", "PowerCycle", "Nmi", "On"}),
			}},
		}
		setID(docs["/redfish/v1/Managers/bmc"], "bmc", "OpenBmc Manager")
		setID(docs["/redfish/v1/Chassis/chassis"], "chassis", "chassis")
		delete(docs[serviceRoot], "Oem")
		p.systems = []string{sys}
		p.resetStyle = "202"
		p.vendor = "OpenBMC"

	case ProfileMulti:
		base := docs[dmtfSystem]
		p.systems = nil
		var members []any
		for _, id := range []string{"Node1", "Node2"} {
			uri := "/redfish/v1/Systems/" + id
			one := renameURI(map[string]map[string]any{uri: base}, dmtfSystem, uri)[uri]
			setID(one, id, "WebFrontEnd "+id)
			docs[uri] = one
			p.systems = append(p.systems, uri)
			members = append(members, map[string]any{"@odata.id": uri})
		}
		delete(docs, dmtfSystem)
		coll := docs["/redfish/v1/Systems"]
		coll["Members"] = members
		coll["Members@odata.count"] = len(members)
		// The manager and chassis link to the systems by URI.
		docs = renameURI(docs, dmtfSystem, p.systems[0])

	case ProfileSushy:
		sys := "/redfish/v1/Systems/" + sushyUUID
		docs = renameURI(docs, dmtfSystem, sys)
		d := docs[sys]
		setID(d, sushyUUID, "node-0")
		d["UUID"] = sushyUUID
		delete(d, "Oem")
		resetAction(d)["ResetType@Redfish.AllowableValues"] = stringsToAny([]string{
			"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"})
		for uri := range docs {
			if uri == serviceRoot+"/SessionService" || strings.HasPrefix(uri, serviceRoot+"/SessionService/") {
				delete(docs, uri)
			}
		}
		root := docs[serviceRoot]
		delete(root, "SessionService")
		delete(root, "Links")
		delete(root, "Oem")
		p.systems = []string{sys}
		p.sessionless = true
		p.sushyErrors = true
		p.vendor = ""

	case ProfileSlowOff:
		p.systems = []string{dmtfSystem}
		p.powerOffDelay = SlowOffDelay

	case ProfilePushButton:
		resetAction(docs[dmtfSystem])["ResetType@Redfish.AllowableValues"] = stringsToAny([]string{"PushPowerButton"})
		p.systems = []string{dmtfSystem}

	case ProfileSessionLimit:
		p.systems = []string{dmtfSystem}
		p.sessionLimit = DefaultSessionLimit

	case ProfileSlowTask:
		p.systems = []string{dmtfSystem}
		p.resetStyle = "202"
		p.taskDelay = SlowTaskDelay

	default:
		return nil, fmt.Errorf("redfishsim: unknown profile %q (known: %s)", name, strings.Join(Profiles(), ", "))
	}
	if p.vendor != "" {
		docs[serviceRoot]["Vendor"] = p.vendor
	}
	p.docs = docs
	pruneDangling(docs)
	return p, nil
}

// pruneDangling removes links to resources the simulator does not serve, so
// every link a client follows answers: a trimmed but consistent tree.
func pruneDangling(docs map[string]map[string]any) {
	served := func(uri string) bool {
		u, _, _ := strings.Cut(uri, "#")
		_, ok := docs[strings.TrimSuffix(u, "/")]
		return ok || strings.Contains(u, "/SessionService/Sessions/") || strings.Contains(u, "/TaskService/Tasks/")
	}
	var walk func(v any) any
	isDangling := func(v any) bool {
		m, ok := v.(map[string]any)
		if !ok || len(m) != 1 {
			return false
		}
		id, ok := m["@odata.id"].(string)
		return ok && !served(id)
	}
	walk = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			for k, child := range t {
				if link, ok := child.(string); ok && strings.HasSuffix(k, "@Redfish.ActionInfo") && !served(link) {
					delete(t, k)
					continue
				}
				if isDangling(child) {
					delete(t, k)
					continue
				}
				if arr, ok := child.([]any); ok && k == "Members" {
					kept := arr[:0]
					for _, e := range arr {
						if !isDangling(e) {
							kept = append(kept, e)
						}
					}
					t[k] = kept
					if _, ok := t["Members@odata.count"]; ok {
						t["Members@odata.count"] = len(kept)
					}
					continue
				}
				t[k] = walk(child)
			}
		case []any:
			kept := t[:0]
			for _, e := range t {
				if isDangling(e) {
					continue
				}
				kept = append(kept, walk(e))
			}
			return kept
		}
		return v
	}
	for uri, d := range docs {
		if strings.HasSuffix(uri, "/SessionService/Sessions") || strings.HasSuffix(uri, "/TaskService/Tasks") {
			continue // members are generated
		}
		walk(d)
	}
}
