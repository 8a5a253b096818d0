// Package redfish is the Redfish fence agent (gofish).
package redfish
