// Package exec runs external FenceAgentAPI programs as fence agents.
package exec
