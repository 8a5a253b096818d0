//go:build !faultinject

package watchdog

// FaultOptionsEnv names a test-only setting, read only by a daemon built
// with the faultinject build tag: what a stand-in device (a FIFO, which
// answers no ioctls) says of itself at close, "magicclose" or "none", as a
// real driver would through WDIOC_GETSUPPORT.
const FaultOptionsEnv = "FENCED_FAULT_WATCHDOG_OPTIONS"

// standInOptions: in the product, a device that answers no watchdog
// ioctls is what it is (see Keeps).
func standInOptions() (Options, bool) { return Options{}, false }
