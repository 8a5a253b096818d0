// Package fenceapi speaks the ClusterLabs FenceAgentAPI: it runs any
// registered agent the way fence-agents programs are run (name=value lines on
// stdin, -o ACTION, metadata XML, exit codes).
package fenceapi
