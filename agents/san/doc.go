// Package san is the fabric-zoning fence agent.
package san
