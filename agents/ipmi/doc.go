// Package ipmi is the IPMI fence agent: chassis power control over IPMI v2.0
// RMCP+ ("lanplus", the default) or IPMI v1.5 LAN, through go-ipmi.
//
// An action runs on the session a device check holds open (agents.Keeper,
// package keep: the daemon keeps a few nodes' sessions to a holder's BMC
// warm, so a takeover's fence needs no login), else on a session of its
// own that it closes after. Off and On succeed
// only once Get Chassis Status reads the requested state back; Reboot is
// off, confirmed off, then on — never a bare power cycle, which a BMC may
// acknowledge before anything happened.
//
// Parameters follow fence_ipmilan's names (ip, ipport, username, password,
// lanplus, cipher, privlvl, hexadecimal_kg, power_timeout, method) so
// existing configurations carry over.
package ipmi
