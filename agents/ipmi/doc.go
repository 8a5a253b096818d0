// Package ipmi is the IPMI fence agent: chassis power control over IPMI v2.0
// RMCP+ ("lanplus", the default) or IPMI v1.5 LAN, through go-ipmi.
//
// Every action opens a session, does its work and closes the session, so no
// BMC session slot is held between fencing operations. Off and On succeed
// only once Get Chassis Status reads the requested state back; Reboot is
// off, confirmed off, then on — never a bare power cycle, which a BMC may
// acknowledge before anything happened.
//
// Parameters follow fence_ipmilan's names (ip, ipport, username, password,
// lanplus, cipher, privlvl, hexadecimal_kg, power_timeout, method) so
// existing configurations carry over.
package ipmi
