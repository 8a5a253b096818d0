// Package exec runs external FenceAgentAPI programs (the ClusterLabs
// fence-agents, or any vendor agent written for Pacemaker) as fence agents,
// unmodified: the "exec" agent kind.
//
// The program is chosen by the agent parameter, an absolute path or a name
// looked up in plugin_dir (default /usr/lib/fenced/agents) and, for fence_*
// names, in /usr/sbin. Every other parameter is passed on the program's
// standard input as name=value lines with action= set, never on its command
// line; NAME_file parameters are read here and passed as NAME. At
// construction the program's "-o metadata" is read (cached per file) and the
// parameters are checked against it, so a typo or a missing required
// parameter fails config validation, not a fence. The program's reboot is
// never run (reboot is off, read back, then on), so method=cycle is refused.
// ParamsFor gives the FenceAgentAPI front-end the program's parameters, so
// `fenced agent exec` takes them as its own.
//
// Exit codes follow the FenceAgentAPI: 0 success (status: on), 2 status off,
// anything else an error. A run that outlives its deadline is killed with
// its whole process group. Standard error, with secret values scrubbed, is
// kept for the fence history: errors carry it (see RunError) and
// Agent.LastStderr returns the last run's.
package exec
