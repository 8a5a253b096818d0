package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/quorum"
)

// Forwarded methods between nodes (over gossip's reliable messages).
const (
	fwdCommand = "command" // commit a quorum.Command on the leader
)

// errNoLeader means no node currently leads a majority.
var errNoLeader = errors.New("no primary-elect: the cluster has no majority leader right now")

// forwardCommand commits c on the raft leader, wherever it is.
func (d *Daemon) forwardCommand(ctx context.Context, c quorum.Command) error {
	if d.raft.IsLeader() {
		_, err := d.raft.Apply(c, d.commitTimeout())
		return err
	}
	leader := d.raft.Leader()
	if leader == "" {
		return errNoLeader
	}
	body, _ := json.Marshal(c)
	_, err := d.members.Call(ctx, leader, fwdCommand, body)
	return err
}

// forwarded answers a request another node forwarded to this one.
func (d *Daemon) forwarded(ctx context.Context, from, method string, body []byte) ([]byte, error) {
	switch method {
	case fwdCommand:
		var c quorum.Command
		if err := json.Unmarshal(body, &c); err != nil {
			return nil, fmt.Errorf("forwarded command from %s: %w", from, err)
		}
		// Only node-scoped commands may be forwarded, and only by the node
		// they are about: a node records its own release.
		if c.Op != quorum.OpRelease || c.Node != from {
			return nil, fmt.Errorf("forwarded command %q from %s refused", c.Op, from)
		}
		if !d.raft.IsLeader() {
			return nil, errNoLeader
		}
		_, err := d.raft.Apply(c, d.commitTimeout())
		return nil, err
	}
	switch method {
	case fwdContact:
		return d.answerContact(body)
	case fwdCommit:
		return d.answerCommit()
	case fwdFence, fwdUnfence, fwdConfirm, fwdStandby, fwdTransfer:
		// The same checks as the local API's: a forwarded reason is
		// cleaned and bounded before it is logged or committed.
		req, err := api.DecodeAdminRequest(body)
		if err != nil {
			return nil, &userError{fmt.Errorf("forwarded %s from %s: %w", method, from, err)}
		}
		return d.adminLocal(ctx, method, req)
	}
	return nil, fmt.Errorf("unknown forwarded method %q", method)
}
