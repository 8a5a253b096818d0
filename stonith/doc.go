// Package stonith is the fencing engine: it runs a node's fence topology
// (ordered levels of devices that must all succeed), confirms every power-off
// by reading the state back, and describes what it did as a Record that the
// cluster commits to its replicated history.
//
// # One command and the engine's read-back
//
// An agent that can send a command on its own (agents.Commander: the IPMI
// agent) is sent the power command only; the engine then reads
// the state back itself, at once and every 100ms (every 500ms after 5s)
// until it reads the wanted state or the command's window ends. Success is
// the read-back, never the command's reply: a refused command is still read
// back once (a BMC may refuse power-off of a chassis that is already off),
// and an acknowledged one that never reads back off is failed (or unknown,
// when the state cannot be read). Other agents run their own off and the
// engine's status query must then agree.
//
// # Kept agents and warm sessions
//
// A fence should be one command plus its read-back, not a login first: a
// slow BMC's session setup costs several round trips. The node's device
// monitor (package daemon/health) owns one long-lived agent per device it
// checks (Engine.Keep returns a Kept) and, while the device matters for the
// next takeover, has it hold an authenticated session kept alive between
// checks. Every operation on a target built from exactly the same agent,
// plug and parameters borrows that agent, and so its session and its
// measured round trip; a target that differs (a reload changed a
// parameter) gets an agent of its own, built and closed with the
// operation. A held session that fails an operation is dropped and the
// operation runs again on a new one (the IPMI agent).
//
// # Levels in parallel
//
// Levels are tried in order, and a level that fails starts the next. A
// level that is not answering does not hold the next one up for its whole
// timeout: when a kept device of the running level failed its last check,
// or has not answered at all within three of its request timeouts (its
// measured round trip and variation; 500ms to 5s, 2s before it was ever
// measured), the next level starts alongside it (Engine.Hedge, on by
// default). Both are off actions, so running them together cannot do what
// either alone would not; success is still one level whose every device
// was read back off, the first such level wins and the others are stopped
// (their tries are recorded, as stopped, unknown or failed). Devices the
// engine has no measurement of (no kept agent: plugins, a first fence
// after start) are not judged: their level runs to its end first. Because
// a stopped level may have cut the node anyway (a SAN zone removed before
// its read-back), unfencing goes through every level whose off may have
// happened, not only the winner.
package stonith
