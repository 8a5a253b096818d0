// Package pdu is the SNMP PDU outlet fence agent.
package pdu
