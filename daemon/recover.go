package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/quorum"
)

// RecoverRequest is an admin's request to start a new voting set from this
// node's data after a majority of the configured nodes is lost for good
// (fenced recover).
type RecoverRequest struct {
	// Fenced is the admin's statement that every other configured node is
	// stopped and will not come back on its current data.
	Fenced bool
	// EpochFloor: the new epoch is above it (the storage's highest token).
	EpochFloor uint64
	// GossipWait is how long gossip looks for the other nodes.
	GossipWait time.Duration
	By         string // user@host
	Reason     string
	Logger     *slog.Logger
}

// ErrNotDeclared refuses a recovery without the admin's statement.
var ErrNotDeclared = errors.New("recover: refused without --yes-i-have-fenced-the-others: it declares every other configured node stopped for good; power them off (or cut them from the storage) first")

// Recover runs a recovery on cfg's node with its daemon stopped: the data
// directory is locked (a running daemon refuses it), gossip looks for the
// other configured nodes for req.GossipWait and any one alive refuses it,
// then the raft data is rewritten (quorum.Recover). It returns what was
// done and the nodes declared gone.
func Recover(cfg *config.Config, req RecoverRequest) (quorum.Recovered, []string, error) {
	var out quorum.Recovered
	if !req.Fenced {
		return out, nil, ErrNotDeclared
	}
	log := req.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return out, nil, err
	}
	defer lock.release()
	peers := peersOf(cfg)
	var gone []string
	for _, p := range peers {
		if p.Name != cfg.Node {
			gone = append(gone, p.Name)
		}
	}
	if alive, err := surveyGossip(cfg, peers, req.GossipWait, log); err != nil {
		return out, nil, err
	} else if len(alive) > 0 {
		return out, nil, fmt.Errorf("recover: refused: %s alive in gossip: a recovery is only for nodes gone for good, and with them running the cluster has (or regains) its majority", strings.Join(alive, ", "))
	}
	self, _ := cfg.NodeByName(cfg.Node)
	out, err = quorum.Recover(quorum.RecoverOptions{Self: cfg.Node, RaftAddr: self.Raft, DataDir: cfg.DataDir, Gone: gone,
		EpochFloor: req.EpochFloor, By: req.By, Time: time.Now(), HistoryLimit: cfg.History.Limit, Reason: req.Reason})
	return out, gone, err
}

// surveyGossip joins gossip on this node's address for wait and returns
// the other configured nodes seen alive or suspect (each "name (address)").
func surveyGossip(cfg *config.Config, peers []quorum.Peer, wait time.Duration, log *slog.Logger) ([]string, error) {
	var alive []string
	_, err := surveyMembers(cfg, peers, wait, "recover", log, func(ms []quorum.Member) bool {
		alive = alive[:0]
		for _, mb := range ms {
			// Suspect counts as alive, as everywhere (Membership.Alive):
			// it was heard lately, and refusing is the safe side.
			if mb.Name != cfg.Node && (mb.State == "alive" || mb.State == "suspect") {
				alive = append(alive, mb.Name+" ("+mb.Addr+")")
			}
		}
		return len(alive) > 0
	})
	return alive, err
}

// surveyMembers joins gossip on this node's address, advertising itself as
// a secondary of version `as` that answers no request, until enough
// (called with the members after each look) says so or wait has passed.
// It returns the members of the last look.
func surveyMembers(cfg *config.Config, peers []quorum.Peer, wait time.Duration, as string, log *slog.Logger, enough func([]quorum.Member) bool) ([]quorum.Member, error) {
	keys, err := clusterKeys(cfg)
	if err != nil {
		return nil, err
	}
	m, err := quorum.JoinMembership(quorum.MembershipOptions{Self: cfg.Node, Peers: peers, Keys: keys, Logger: log,
		Handler: func(_ context.Context, _, method string, _ []byte) ([]byte, error) {
			return nil, fmt.Errorf("%s: this node is not started yet", method)
		}}, quorum.Meta{Role: RoleSecondary, Version: as})
	if err != nil {
		return nil, err
	}
	defer m.Shutdown()
	deadline := time.Now().Add(wait)
	for {
		ms := m.Members()
		if enough(ms) || time.Now().After(deadline) {
			return ms, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
