// Package ipmi is the IPMI fence agent (go-ipmi, lanplus).
package ipmi
