package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/daemon/alerts"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/quorum"
)

// One configuration for the whole cluster.
//
// Every node fingerprints the cluster-wide part of its configuration
// (config.ClusterKeys: one hash per key; quorum.FingerprintOf: one of them
// all) and advertises the fingerprint in its gossip metadata. The leader
// commits the cluster's fingerprint through the log:
//
//   - when none is committed yet (a new cluster, or one upgraded from a
//     fenced without fingerprints), the one a majority of the configured
//     nodes advertises, once the leader runs it too;
//   - when every configured node is alive and runs the same configuration,
//     other than the committed one (a change made on every node and
//     reloaded or restarted everywhere);
//   - on `fencectl config accept [NODE]`: NODE's (default: the node asked).
//
// A node whose fingerprint differs from the committed one — or, before any
// is committed, from the one a majority runs — is not eligible for primacy
// (SetIneligible "config"): a holder keeps its tenure, but none is granted
// to it, and an ineligible leader hands leadership on. Status shows every
// such node as CONFIG MISMATCH with the keys that differ (its per-key
// hashes are fetched by a call, and compared with the committed ones), the
// node logs it and raises a config alert. When no running data node is
// eligible, every node says so, with what to do.

// Forwarded methods of the cluster configuration.
const (
	fwdConfigKeys   = "config-keys"   // this node's per-key hashes
	fwdConfigAccept = "config-accept" // commit a node's fingerprint (on the leader)
)

// ownConfig is this node's cluster-wide configuration as hashes.
type ownConfig struct {
	hash string
	keys map[string]string
	// witness: this node is a witness, and keys leave the resource group
	// out (config.WitnessKeys).
	witness bool
}

func (d *Daemon) setOwnConfig(c *config.Config) {
	keys := c.ClusterKeys()
	self, _ := c.NodeByName(c.Node)
	d.conf.own.Store(&ownConfig{hash: quorum.FingerprintOf(keys), keys: keys, witness: self.Witness()})
}

// A witness runs no resource and is compared by the rest of the
// configuration alone: it advertises the fingerprint of that part
// (config.ClusterKeys leaves the group out on a witness), and matches a
// configuration whose part without the group it runs.

// witnessView is the fingerprint and per-key hashes of keys' part without
// the resource group: what a witness runs of that configuration.
func witnessView(keys map[string]string) (string, map[string]string) {
	w := config.WitnessKeys(keys)
	return quorum.FingerprintOf(w), w
}

// runs reports whether a node that advertises a runs the configuration
// (hash, keys): a data node when it advertises hash; a witness when it
// advertises the fingerprint of its part without the group, or hash itself
// (a witness of a fenced from before this rule).
func runs(a advert, hash string, keys map[string]string) bool {
	switch {
	case a.hash == "":
		return false
	case a.hash == hash:
		return true
	case a.witness:
		w, _ := witnessView(keys)
		return a.hash == w
	}
	return false
}

// differingFrom lists the keys in which a node whose per-key hashes are
// theirs (a witness's when witness) differs from the configuration keys.
func differingFrom(theirs map[string]string, witness bool, keys map[string]string) []string {
	if witness {
		_, keys = witnessView(keys)
	}
	return config.DifferingKeys(theirs, keys)
}

// OwnFingerprint is the fingerprint of this node's cluster-wide
// configuration.
func (d *Daemon) OwnFingerprint() string { return d.conf.own.Load().hash }

// configWatch is the state of configLoop that the API reads.
type configWatch struct {
	mu sync.Mutex
	// remote holds other nodes' per-key hashes, fetched for the nodes
	// whose fingerprint differs from the committed one.
	remote map[string]remoteKeys
	// noEligible, when set, says that no running data node may take
	// primacy, and what to do.
	noEligible string
	// selfReason is why this node's configuration makes it ineligible.
	selfReason string
	lastReload *api.ReloadInfo

	// Loop goroutines only (quorum*: quorumLoop's).
	mismatched   bool
	quorumHad    bool
	quorumLostAt time.Time // when quorum went missing (zero: have it)
	quorumLost   bool      // the loss was alerted (quorumLostAt: logged)
	quorumWhy    string    // what is missing, as last logged
	commitAfter  time.Time
	versionAfter time.Time // the cluster version's commit is retried then (versionStep)
}

type remoteKeys struct {
	hash    string
	keys    map[string]string
	err     string
	fetched time.Time
}

// advert is one configured node's advertised fingerprint as gossip sees it.
type advert struct {
	node    string
	alive   bool
	hash    string // "" when not alive or not advertised (an older fenced)
	witness bool
	standby bool
}

// configLoop keeps this node's eligibility and the committed fingerprint
// (on the leader) up to date, until done is closed (quorumLoop does the
// quorum's log and alerts).
// It runs at every change of the replicated state, of leader or of gossip
// membership (a join, a leave, new metadata such as a fingerprint), and
// every second besides for what is due by time (a commit retried).
func (d *Daemon) configLoop(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		changed, leader, members := d.raft.FSM().Changed(), d.raft.LeaderChanged(), d.members.Changed()
		d.configStep(time.Now())
		select {
		case <-done:
			return
		case <-t.C:
		case <-changed:
		case <-leader:
		case <-members:
		}
	}
}

// adverts lists every configured node's advertised fingerprint.
func (d *Daemon) adverts() []advert {
	standby := d.raft.FSM().Holders().Standby
	var out []advert
	for _, m := range d.members.Members() {
		a := advert{node: m.Name, alive: m.State == "alive" || m.State == "suspect", witness: d.kindOf(m.Name) == config.RoleWitness, standby: standby[m.Name]}
		if m.Name == d.self {
			a.alive, a.hash = true, d.conf.own.Load().hash
		} else if a.alive {
			a.hash = m.Meta.Config
		}
		out = append(out, a)
	}
	return out
}

// majorityHash is the fingerprint at least need of the nodes advertise, or "".
func majorityHash(ads []advert, need int) string {
	count := map[string]int{}
	for _, a := range ads {
		if a.hash != "" {
			count[a.hash]++
		}
	}
	for h, n := range count {
		if n >= need {
			return h
		}
	}
	return ""
}

// configEligibility says why a node running own may not take primacy
// because of its configuration ("" = it may). remote holds the per-key
// hashes fetched from other nodes: before a configuration is committed,
// they name the keys in which the nodes differ.
func configEligibility(own *ownConfig, committed *quorum.ConfigFingerprint, ads []advert, majority int, remote map[string]remoteKeys) string {
	if committed != nil {
		self := advert{hash: own.hash, witness: own.witness}
		if runs(self, committed.Hash, committed.Keys) {
			return ""
		}
		keys := differingFrom(own.keys, own.witness, committed.Keys)
		return withHint(fmt.Sprintf("CONFIG MISMATCH: this node's configuration (fingerprint %s) differs from the cluster's (%s, committed by %s) in %s",
			own.hash, committed.Hash, committed.By, keyList(keys)), keys)
	}
	if own.witness {
		// Nothing to compare a witness's part with before the data nodes
		// agree; and it never holds primacy anyway.
		return ""
	}
	if agreeing(own, ads) >= majority {
		return ""
	}
	if m := majorityHash(ads, majority); m != "" && m != own.hash {
		return fmt.Sprintf("CONFIG MISMATCH: this node's configuration (fingerprint %s) differs from the one a majority of the nodes runs (%s)", own.hash, m)
	}
	var seen, diffs []string
	var all []string
	for _, a := range ads {
		h := a.hash
		if h == "" {
			h = "not seen"
		}
		seen = append(seen, a.node+" "+h)
		if a.hash == "" || runs(a, own.hash, own.keys) {
			continue
		}
		r, ok := remote[a.node]
		if !ok || r.hash != a.hash || r.err != "" {
			continue
		}
		keys := differingFrom(r.keys, a.witness, own.keys)
		all = append(all, keys...)
		diffs = append(diffs, fmt.Sprintf("from %s's in %s", a.node, keyList(keys)))
	}
	why := "waiting for a majority of the configured nodes to run one configuration (" + strings.Join(seen, ", ") + ")"
	if len(diffs) > 0 {
		why += "; this node's differs " + strings.Join(diffs, ", ")
	}
	return withHint(why, all)
}

// agreeing counts the nodes that run own's configuration, this one among
// them.
func agreeing(own *ownConfig, ads []advert) int {
	n := 0
	for _, a := range ads {
		if runs(a, own.hash, own.keys) {
			n++
		}
	}
	return n
}

// withHint adds to why how to declare the keys that may be a node's own
// (config.NodeLocalHint), if any are among keys.
func withHint(why string, keys []string) string {
	if h := config.NodeLocalHint(slices.Compact(slices.Sorted(slices.Values(keys)))); h != "" {
		return why + "; " + h
	}
	return why
}

// keyList names at most 10 keys.
func keyList(keys []string) string {
	if len(keys) > 10 {
		return strings.Join(keys[:10], ", ") + fmt.Sprintf(" and %d more", len(keys)-10)
	}
	return strings.Join(keys, ", ")
}

// toCommit says whether the leader, running own, should commit its own
// fingerprint, and why. A witness's is never committed: it lacks the
// resource group, which every data node would then differ in.
func toCommit(own *ownConfig, committed *quorum.ConfigFingerprint, ads []advert, majority int) (bool, string) {
	if own.witness {
		return false, ""
	}
	if committed == nil {
		if agreeing(own, ads) >= majority {
			return true, "a majority of the configured nodes runs it"
		}
		return false, ""
	}
	if committed.Hash == own.hash {
		return false, ""
	}
	for _, a := range ads {
		if !a.alive || !runs(a, own.hash, own.keys) {
			return false, ""
		}
	}
	return true, "every configured node runs it"
}

// noEligibleWarning says, when no running data node may take primacy
// because of its configuration, what to do ("" otherwise).
func noEligibleWarning(committed *quorum.ConfigFingerprint, ads []advert) string {
	if committed == nil {
		return ""
	}
	data, differing := 0, 0
	for _, a := range ads {
		if !a.alive || a.witness || a.standby {
			continue
		}
		data++
		if !runs(a, committed.Hash, committed.Keys) {
			differing++
		}
	}
	if data == 0 || differing < data {
		return ""
	}
	return fmt.Sprintf("NO NODE ELIGIBLE for primacy: every running data node's configuration differs from the cluster's (%s); "+
		"if the primary failed now, no node would take over. Once every node runs the new file, run `fencectl config accept` "+
		"(it commits the configuration of the node asked); or restore the committed file and `fencectl reload`", committed.Hash)
}

// configStep is one round of configLoop.
func (d *Daemon) configStep(now time.Time) {
	cw := &d.conf.cw
	own := d.conf.own.Load()
	committed := d.raft.FSM().Config()
	ads := d.adverts()
	majority := d.cfg.Majority()

	cw.mu.Lock()
	remote := maps.Clone(cw.remote)
	cw.mu.Unlock()
	reason := configEligibility(own, committed, ads, majority, remote)
	cw.mu.Lock()
	prevReason := cw.selfReason
	cw.selfReason = reason
	cw.mu.Unlock()
	if reason != prevReason {
		d.SetIneligible("config", reason)
	}
	mismatch := strings.HasPrefix(reason, "CONFIG MISMATCH")
	if mismatch != cw.mismatched {
		cw.mismatched = mismatch
		if mismatch {
			d.log.Warn("configuration differs from the cluster's: not eligible for primacy", "reason", reason)
			d.alerts.Emit(alerts.Event{Name: alerts.ConfigMismatch, Kind: alerts.KindAttribute, Node: d.self,
				Attribute: "config", Value: "mismatch: " + strings.TrimPrefix(reason, "CONFIG MISMATCH: ")})
		} else {
			d.log.Info("configuration matches the cluster's again", "fingerprint", own.hash)
			d.alerts.Emit(alerts.Event{Name: alerts.ConfigMatch, Kind: alerts.KindAttribute, Node: d.self,
				Attribute: "config", Value: "match: fingerprint " + own.hash})
		}
	}

	warn := noEligibleWarning(committed, ads)
	cw.mu.Lock()
	prevWarn := cw.noEligible
	cw.noEligible = warn
	cw.mu.Unlock()
	if warn != "" && prevWarn == "" {
		d.log.Error("configuration: no node is eligible for primacy", "what_to_do", warn)
		d.alerts.Emit(alerts.Event{Name: alerts.ConfigMismatch, Kind: alerts.KindAttribute, Node: d.self,
			Attribute: "config", Value: warn})
	}

	if d.raft.IsLeader() && now.After(cw.commitAfter) {
		if ok, why := toCommit(own, committed, ads, majority); ok {
			fp := &quorum.ConfigFingerprint{Hash: own.hash, Keys: own.keys, Node: d.self, By: "leader (" + why + ")", Time: now}
			if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpConfig, Config: fp}, d.commitTimeout()); err != nil {
				d.log.Warn("commit the cluster's configuration fingerprint", "err", err)
				cw.commitAfter = now.Add(time.Second)
			} else {
				d.log.Info("cluster configuration fingerprint committed", "fingerprint", own.hash, "why", why)
			}
		}
	}
	d.fetchRemoteKeys(committed, ads, now)
	d.versionStep(now)
}

// fetchRemoteKeys asks every node whose fingerprint differs from the
// committed one — before one is committed, from this node's — for its
// per-key hashes (once per fingerprint; again after a failure 5s later),
// and forgets the rest.
func (d *Daemon) fetchRemoteKeys(committed *quorum.ConfigFingerprint, ads []advert, now time.Time) {
	cw := &d.conf.cw
	own := d.conf.own.Load()
	hash, keys := own.hash, own.keys
	if committed != nil {
		hash, keys = committed.Hash, committed.Keys
	}
	cw.mu.Lock()
	if cw.remote == nil {
		cw.remote = map[string]remoteKeys{}
	}
	var ask []advert
	for _, a := range ads {
		r, ok := cw.remote[a.node]
		switch {
		case a.node == d.self || a.hash == "" || runs(a, hash, keys) || committed == nil && own.witness:
			delete(cw.remote, a.node)
		case !ok || r.hash != a.hash || (r.err != "" && now.Sub(r.fetched) > 5*time.Second):
			ask = append(ask, a)
		}
	}
	cw.mu.Unlock()
	for _, a := range ask {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		body, err := d.members.Call(ctx, a.node, fwdConfigKeys, nil)
		cancel()
		r := remoteKeys{hash: a.hash, fetched: now}
		var reply configKeysReply
		switch {
		case err != nil:
			r.err = err.Error()
		case json.Unmarshal(body, &reply) != nil || quorum.FingerprintOf(reply.Keys) != reply.Hash:
			r.err = "malformed answer"
		default:
			r.hash, r.keys = reply.Hash, reply.Keys
		}
		cw.mu.Lock()
		cw.remote[a.node] = r
		cw.mu.Unlock()
	}
}

// configKeysReply is the answer to fwdConfigKeys.
type configKeysReply struct {
	Hash string            `json:"hash"`
	Keys map[string]string `json:"keys"`
}

func (d *Daemon) answerConfigKeys() ([]byte, error) {
	own := d.conf.own.Load()
	return json.Marshal(configKeysReply{Hash: own.hash, Keys: own.keys})
}

// configStatus is the configuration part of the status. Each node whose
// configuration differs from the committed one — before one is committed,
// from this node's — is marked, with the keys that differ when known.
func (d *Daemon) configStatus(nodes []api.NodeStatus) *api.ConfigStatus {
	own := d.conf.own.Load()
	committed := d.raft.FSM().Config()
	cs := &api.ConfigStatus{Fingerprint: own.hash, File: d.cfg.File()}
	cw := &d.conf.cw
	cw.mu.Lock()
	cs.Warning = cw.noEligible
	cs.LastReload = cw.lastReload
	remote := maps.Clone(cw.remote)
	selfReason := cw.selfReason
	cw.mu.Unlock()
	hash, keys := own.hash, own.keys
	if committed == nil {
		cs.Match = selfReason == ""
	} else {
		cs.Committed, cs.CommittedBy, cs.CommittedNode = committed.Hash, committed.By, committed.Node
		cs.CommittedAt = wallPtr(committed.Time)
		hash, keys = committed.Hash, committed.Keys
		cs.Match = runs(advert{hash: own.hash, witness: own.witness}, hash, keys)
		if !cs.Match {
			cs.Differing = differingFrom(own.keys, own.witness, keys)
		}
	}
	all := slices.Clone(cs.Differing)
	for i := range nodes {
		n := &nodes[i]
		witness := d.kindOf(n.Name) == config.RoleWitness
		switch {
		case n.Config == "" || runs(advert{hash: n.Config, witness: witness}, hash, keys):
		case n.Name == d.self:
			n.ConfigMismatch, n.ConfigDiffering = true, cs.Differing
		case committed == nil && own.witness:
			// A witness has nothing of the group to compare the data
			// nodes' by before a configuration is committed.
		default:
			n.ConfigMismatch = true
			if r, ok := remote[n.Name]; ok && r.hash == n.Config && r.err == "" {
				n.ConfigDiffering = differingFrom(r.keys, witness, keys)
				all = append(all, n.ConfigDiffering...)
			}
		}
	}
	cs.Hint = config.NodeLocalHint(slices.Compact(slices.Sorted(slices.Values(all))))
	return cs
}

// configKeys is what this node knows of the configurations' per-key
// hashes: its own, the committed one, and each other node's — the
// committed one's or this node's when it advertises that, else what was
// fetched from it (fetchRemoteKeys).
func (d *Daemon) configKeys() api.ConfigKeys {
	own := d.conf.own.Load()
	committed := d.raft.FSM().Config()
	cw := &d.conf.cw
	cw.mu.Lock()
	remote := maps.Clone(cw.remote)
	cw.mu.Unlock()
	out := api.ConfigKeys{SchemaVersion: SchemaVersion, Node: d.self, Nodes: []api.KeyHashes{}}
	if committed != nil {
		out.Committed = &api.KeyHashes{Node: committed.Node, Fingerprint: committed.Hash, Keys: maps.Clone(committed.Keys)}
	}
	for _, a := range d.adverts() {
		k := api.KeyHashes{Node: a.node, Witness: a.witness, Fingerprint: a.hash}
		r, fetched := remote[a.node]
		switch {
		case a.hash == "":
		case a.node == d.self || a.hash == own.hash:
			k.Keys = maps.Clone(own.keys)
		case committed != nil && runs(a, committed.Hash, committed.Keys):
			k.Keys = committed.Keys
			if a.witness && a.hash != committed.Hash {
				_, k.Keys = witnessView(committed.Keys)
			}
			k.Keys = maps.Clone(k.Keys)
		case fetched && r.hash == a.hash && r.err == "":
			k.Keys = maps.Clone(r.keys)
		}
		out.Nodes = append(out.Nodes, k)
	}
	return out
}

// configAccept commits the fingerprint of node's configuration (default:
// this node's) as the cluster's, on the leader wherever it is.
func (d *Daemon) configAccept(ctx context.Context, req AdminRequest) (json.RawMessage, error) {
	if req.Node == "" {
		req.Node = d.self
	}
	if _, ok := d.cfg.NodeByName(req.Node); !ok {
		return nil, &userError{fmt.Errorf("unknown node %q", req.Node)}
	}
	for try := 0; ; try++ {
		var out json.RawMessage
		var err error
		if d.raft.IsLeader() {
			out, err = d.configAcceptLocal(ctx, req)
		} else if leader := d.raft.Leader(); leader == "" {
			err = errNoLeader
		} else {
			body, _ := json.Marshal(req)
			out, err = d.members.Call(ctx, leader, fwdConfigAccept, body)
		}
		if err != nil && isRetry(err) && try < 5 && ctx.Err() == nil {
			sleepCtx(ctx, d.cfg.Timing.Lease.D()/2)
			continue
		}
		return out, err
	}
}

// configAcceptLocal runs an accept on the leader: it gets the node's
// per-key hashes (its own, or by a call), checks them against what the
// node advertises, and commits them.
func (d *Daemon) configAcceptLocal(ctx context.Context, req AdminRequest) (json.RawMessage, error) {
	if !d.raft.IsLeader() {
		return nil, errNotLeader
	}
	var keys configKeysReply
	if req.Node == d.self {
		own := d.conf.own.Load()
		keys = configKeysReply{Hash: own.hash, Keys: own.keys}
	} else {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		body, err := d.members.Call(cctx, req.Node, fwdConfigKeys, nil)
		cancel()
		if err != nil {
			return nil, &userError{fmt.Errorf("%s does not answer (%v): only a running node's configuration can be accepted", req.Node, err)}
		}
		if json.Unmarshal(body, &keys) != nil || quorum.FingerprintOf(keys.Keys) != keys.Hash {
			return nil, fmt.Errorf("%s answered a malformed configuration fingerprint", req.Node)
		}
	}
	if d.kindOf(req.Node) == config.RoleWitness {
		return nil, &userError{fmt.Errorf("%s is a witness: its configuration leaves the resource group out; accept a data node's", req.Node)}
	}
	ads := d.adverts()
	eligible := false
	for _, a := range ads {
		if a.alive && !a.witness && !a.standby && (a.hash == keys.Hash || a.node == req.Node) {
			eligible = true
		}
	}
	if !eligible {
		return nil, &userError{fmt.Errorf("no running data node (out of standby) runs %s's configuration %s: accepting it would leave no node eligible for primacy", req.Node, keys.Hash)}
	}
	prev := d.raft.FSM().Config()
	fp := &quorum.ConfigFingerprint{Hash: keys.Hash, Keys: keys.Keys, Node: req.Node, By: req.RequestedBy, Time: time.Now()}
	if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpConfig, Config: fp}, d.commitTimeout()); err != nil {
		return nil, err
	}
	d.log.Warn("cluster configuration accepted", "fingerprint", keys.Hash, "of", req.Node, "by", req.RequestedBy)
	reply := api.ConfigAcceptReply{SchemaVersion: SchemaVersion, Fingerprint: keys.Hash, Node: req.Node, Differing: []api.NodeConfig{}}
	if prev != nil {
		reply.Previous = prev.Hash
	}
	for _, a := range ads {
		if runs(a, keys.Hash, keys.Keys) || a.node == req.Node {
			continue
		}
		nc := api.NodeConfig{Node: a.node, Fingerprint: a.hash, State: "running another configuration"}
		if !a.alive {
			nc.State = "not seen"
		}
		if v := d.raft.FSM().Holders(); v.Holder == a.node && v.HolderState != quorum.HolderReleased {
			nc.State += "; it is the primary: it keeps serving but will not be granted primacy again: hand over (fencectl transfer), then restart or reload it with the new file"
		}
		reply.Differing = append(reply.Differing, nc)
	}
	slices.SortFunc(reply.Differing, func(a, b api.NodeConfig) int { return strings.Compare(a.Node, b.Node) })
	return json.Marshal(reply)
}
