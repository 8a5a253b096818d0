//go:build !faultinject

package daemon

import "time"

// Without the faultinject build tag (the product), no fault is injected.

func stallFromEnv() time.Duration { return 0 }

func (d *Daemon) injectedStall() {}
