package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/apiclient"
	"github.com/fenced/fenced/daemon/config"
)

// compareWithCluster tells, when a fenced answers on the file's api.socket
// (the daemon of this machine), whether the file agrees with the
// configuration the cluster committed and with each node's as that daemon
// knows them, which keys differ (names only: the daemon hands out hashes),
// and how to declare those that may be each node's own. It says nothing
// when no daemon answers: a file checked before the cluster first starts
// has nothing to be compared with. Each line is a note; none fails the
// validation, since which side is right is for the admin to say.
func compareWithCluster(ctx context.Context, cfg *config.Config, w io.Writer) {
	c := apiclient.New(cfg.API.Socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var ck api.ConfigKeys
	if err := c.Do(ctx, "GET", "/v1/config/keys", nil, nil, &ck); err != nil {
		return
	}
	mine := cfg.ClusterKeys()
	self, _ := cfg.NodeByName(cfg.Node)
	witness := self.Witness()
	// compare names the keys in which this file differs from theirs,
	// each side as a witness sees it when either is one.
	compare := func(theirs map[string]string, theirsWitness bool) []string {
		a, b := mine, theirs
		if witness || theirsWitness {
			a, b = config.WitnessKeys(a), config.WitnessKeys(b)
		}
		return config.DifferingKeys(a, b)
	}
	var all []string
	note := func(format string, args ...any) {
		fmt.Fprintf(w, "cluster: "+format+"\n", args...)
	}
	if cm := ck.Committed; cm != nil {
		if d := compare(cm.Keys, false); len(d) > 0 {
			note("this file differs from the cluster's committed configuration (%s, %s's) in %s: on %s it would not be eligible for primacy",
				cm.Fingerprint, cm.Node, strings.Join(d, ", "), cmp.Or(cfg.Node, "this node"))
			all = append(all, d...)
		} else {
			note("this file agrees with the cluster's committed configuration (%s)", cm.Fingerprint)
		}
	}
	for _, n := range ck.Nodes {
		if n.Node == cfg.Node || n.Keys == nil {
			continue
		}
		if d := compare(n.Keys, n.Witness); len(d) > 0 {
			note("this file differs from the configuration %s runs (%s) in %s", n.Node, n.Fingerprint, strings.Join(d, ", "))
			all = append(all, d...)
		}
	}
	if h := config.NodeLocalHint(slices.Compact(slices.Sorted(slices.Values(all)))); h != "" {
		note("%s", h)
	}
}
