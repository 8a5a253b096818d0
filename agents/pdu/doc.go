// Package pdu is the SNMP PDU outlet fence agent ("pdu"): it switches the
// outlets that feed a target off, reads them back until every one is off,
// and only then reports success.
//
// Parameters follow fence_apc_snmp (ip, ipport, community, snmp_version,
// username, password, snmp_sec_level, snmp_auth_prot, snmp_priv_prot,
// snmp_priv_passwd, plug, power_timeout, power_wait). The PDU family (APC,
// APC rPDU, Eaton ePDU, Raritan PX, ServerTech Sentry) is chosen by pdu_type
// or detected from sysObjectID.
//
// A target may be fed by several outlets on several PDUs (dual power
// supplies): ip may list several PDUs, and plug several outlets, each
// optionally qualified with its PDU as HOST[:PORT]/OUTLET. Off switches them
// all only after every PDU answered a first read, so an unreachable PDU fails
// the fence before anything was switched, and the error names it.
package pdu
