package pdu

import (
	"fmt"
	"sort"
	"strings"
)

// vendor is one PDU family's outlet MIB: where an outlet's state is read,
// how it is switched, and how its names are listed. OIDs take the outlet
// number in place of %d.
type vendor struct {
	Name        string
	Description string
	// SysObjectIDs are sysObjectID.0 prefixes that identify the family;
	// the longest matching prefix over all vendors wins.
	SysObjectIDs []string
	Status       string
	Names        string // table of outlet names: index is the outlet number
	On, Off      command
	// OnStates and OffStates are the status values that mean powered and
	// unpowered; anything else (rebooting, pending, error) is neither.
	OnStates, OffStates []int
}

// command is a SET of an INTEGER to an OID.
type command struct {
	OID   string
	Value int
}

func (v *vendor) state(value int) (on, off bool) {
	for _, s := range v.OnStates {
		if s == value {
			return true, false
		}
	}
	for _, s := range v.OffStates {
		if s == value {
			return false, true
		}
	}
	return false, false
}

func oid(format string, outlet int) string { return fmt.Sprintf(format, outlet) }

// vendors is the table of supported families. The APC entries follow the
// PowerNet MIB as fence_apc_snmp uses it; the others follow the vendors'
// published MIBs (EATON-EPDU-MIB, Raritan PDU-MIB, Sentry3-MIB).
var vendors = map[string]*vendor{
	"apc": {
		Name:        "apc",
		Description: "APC PowerNet Master Switch / switched rack PDU (sPDUOutletCtl)",
		// Every APC card answers the old MasterSwitch table: it is the
		// fallback for any APC sysObjectID not matched more precisely.
		SysObjectIDs: []string{"1.3.6.1.4.1.318"},
		Status:       "1.3.6.1.4.1.318.1.1.4.4.2.1.3.%d",
		Names:        "1.3.6.1.4.1.318.1.1.4.4.2.1.4",
		On:           command{"1.3.6.1.4.1.318.1.1.4.4.2.1.3.%d", 1},
		Off:          command{"1.3.6.1.4.1.318.1.1.4.4.2.1.3.%d", 2},
		OnStates:     []int{1},
		OffStates:    []int{2},
	},
	"apc_rpdu": {
		Name:         "apc_rpdu",
		Description:  "APC rack PDU (rPDUOutletControl, rPDUOutletStatus)",
		SysObjectIDs: []string{"1.3.6.1.4.1.318.1.3.4.5"},
		Status:       "1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.%d",
		Names:        "1.3.6.1.4.1.318.1.1.12.3.5.1.1.2",
		On:           command{"1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.%d", 1},
		Off:          command{"1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.%d", 2},
		OnStates:     []int{1},
		OffStates:    []int{2},
	},
	"eaton_epdu": {
		Name:         "eaton_epdu",
		Description:  "Eaton ePDU G2/G3 (EATON-EPDU-MIB outletControl, unit 0)",
		SysObjectIDs: []string{"1.3.6.1.4.1.534.6.6.7"},
		Status:       "1.3.6.1.4.1.534.6.6.7.6.6.1.2.0.%d",
		Names:        "1.3.6.1.4.1.534.6.6.7.6.1.1.3.0",
		// The On/Off command objects take a delay in seconds: 0 is now.
		On:        command{"1.3.6.1.4.1.534.6.6.7.6.6.1.4.0.%d", 0},
		Off:       command{"1.3.6.1.4.1.534.6.6.7.6.6.1.3.0.%d", 0},
		OnStates:  []int{1},
		OffStates: []int{0},
	},
	"raritan_px": {
		Name:         "raritan_px",
		Description:  "Raritan Dominion PX (PDU-MIB outletOperationalState)",
		SysObjectIDs: []string{"1.3.6.1.4.1.13742.4"},
		Status:       "1.3.6.1.4.1.13742.4.1.2.2.1.3.%d",
		Names:        "1.3.6.1.4.1.13742.4.1.2.2.1.2",
		On:           command{"1.3.6.1.4.1.13742.4.1.2.2.1.3.%d", 1},
		Off:          command{"1.3.6.1.4.1.13742.4.1.2.2.1.3.%d", 0},
		OnStates:     []int{1},
		OffStates:    []int{0},
	},
	"servertech_sentry3": {
		Name:         "servertech_sentry3",
		Description:  "ServerTech Sentry switched CDU, tower A (Sentry3-MIB outletControlAction)",
		SysObjectIDs: []string{"1.3.6.1.4.1.1718.3"},
		Status:       "1.3.6.1.4.1.1718.3.2.3.1.5.1.1.%d",
		Names:        "1.3.6.1.4.1.1718.3.2.3.1.3.1.1",
		On:           command{"1.3.6.1.4.1.1718.3.2.3.1.11.1.1.%d", 1},
		Off:          command{"1.3.6.1.4.1.1718.3.2.3.1.11.1.1.%d", 2},
		// idleOn, wakeOn, on, lockedOn / idleOff, wakeOff, off, lockedOff.
		OnStates:  []int{1, 3, 5, 7},
		OffStates: []int{0, 2, 4, 6},
	},
}

// vendorNames lists the pdu_type values, "auto" first.
func vendorNames() []string {
	names := make([]string, 0, len(vendors))
	for n := range vendors {
		names = append(names, n)
	}
	sort.Strings(names)
	return append([]string{"auto"}, names...)
}

// vendorBySysObjectID picks the family whose prefix matches sysObjectID
// longest, or nil.
func vendorBySysObjectID(sysObjectID string) *vendor {
	id := strings.TrimPrefix(sysObjectID, ".")
	var best *vendor
	bestLen := 0
	for _, v := range vendors {
		for _, p := range v.SysObjectIDs {
			if (id == p || strings.HasPrefix(id, p+".")) && len(p) > bestLen {
				best, bestLen = v, len(p)
			}
		}
	}
	return best
}
