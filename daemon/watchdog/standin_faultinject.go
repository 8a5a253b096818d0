//go:build faultinject

package watchdog

import "os"

// FaultOptionsEnv: see standin.go.
const FaultOptionsEnv = "FENCED_FAULT_WATCHDOG_OPTIONS"

func standInOptions() (Options, bool) {
	switch os.Getenv(FaultOptionsEnv) {
	case "magicclose":
		return Options{Known: true, MagicClose: true}, true
	case "none":
		return Options{Known: true}, true
	}
	return Options{}, false
}
