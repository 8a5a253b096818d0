// Command fenced-lab runs fenced's demonstration and the device and storage
// simulators its tests drive: a local cluster with simulated BMCs (`demo`),
// and `sim ipmi|redfish|san|storage|writer`. It is a separate program so
// that none of this is linked into the packaged daemon; it is built by `make
// build` and never packaged.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
