package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// Forwarded methods between nodes (over gossip's reliable messages).
const (
	fwdCommand = "command" // commit a quorum.Command on the leader
)

// errNoLeader means no node currently leads a majority.
var errNoLeader = errors.New("no primary-elect: the cluster has no majority leader right now")

// forwardCommand commits c on the raft leader, wherever it is.
func (d *Daemon) forwardCommand(ctx context.Context, c quorum.Command) error {
	_, err := d.proposeCommand(ctx, c)
	return err
}

// proposeCommand commits c on the raft leader, wherever it is, and returns
// the state machine's answer: a quorum.Grant, a record's ID (uint64), or
// nil (a leader of an earlier version sends no answer back: nil).
func (d *Daemon) proposeCommand(ctx context.Context, c quorum.Command) (any, error) {
	if d.raft.IsLeader() {
		return d.raft.Apply(c, d.commitTimeout())
	}
	leader := d.raft.Leader()
	if leader == "" {
		return nil, errNoLeader
	}
	body, _ := json.Marshal(c)
	reply, err := d.members.Call(ctx, leader, fwdCommand, body)
	if err != nil {
		return nil, err
	}
	return decodeAnswer(reply)
}

// forwardAnswer is the leader's reply to a forwarded command: the state
// machine's answer, so that a node that writes through the leader (the
// holder of a group other than the default one) reads the grant or the
// record ID the leader's Apply returned.
type forwardAnswer struct {
	Grant *quorum.Grant `json:"grant,omitempty"`
	ID    uint64        `json:"id,omitempty"`
}

// encodeAnswer is res as the leader sends it back (nil: no answer).
func encodeAnswer(res any) []byte {
	var a forwardAnswer
	switch r := res.(type) {
	case quorum.Grant:
		a.Grant = &r
	case uint64:
		a.ID = r
	default:
		return nil
	}
	b, _ := json.Marshal(a)
	return b
}

// decodeAnswer reads the leader's answer (an empty one is nil).
func decodeAnswer(b []byte) (any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var a forwardAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("the leader's answer to a forwarded command: %w", err)
	}
	switch {
	case a.Grant != nil:
		return *a.Grant, nil
	case a.ID != 0:
		return a.ID, nil
	}
	return nil, nil
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
		// they are about.
		if !acceptForwarded(&c, from) {
			return nil, fmt.Errorf("forwarded command %q from %s refused", c.Op, from)
		}
		if !d.raft.IsLeader() {
			return nil, errNoLeader
		}
		res, err := d.raft.Apply(c, d.commitTimeout())
		if err != nil {
			return nil, err
		}
		return encodeAnswer(res), nil
	}
	switch method {
	case fwdContact:
		return d.answerContact(body)
	case fwdCommit:
		return d.answerCommit()
	case fwdFencePath:
		return d.answerFencePath(body)
	case fwdFenceRun:
		return d.answerFenceRun(ctx, from, body)
	case fwdConfigKeys:
		return d.answerConfigKeys()
	case fwdReport:
		return d.answerReport(ctx, from, body)
	case fwdConfigAccept:
		req, err := api.DecodeAdminRequest(body)
		if err != nil {
			return nil, &userError{fmt.Errorf("forwarded %s from %s: %w", method, from, err)}
		}
		return d.configAcceptLocal(ctx, req)
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

// acceptForwarded reports whether another node may have the leader commit c:
// only what a node says about itself. A node records its own release, that
// it may still run the group and cannot stop it (unclean), and its own
// unfencing at start (a new record of an "on" it ran on itself;
// such a record clears nothing in the state machine, unlike a fence or a
// confirmation, which only the leader records). The record's text is
// cleaned and bounded like an admin request's before it is committed.
func acceptForwarded(c *quorum.Command, from string) bool {
	named := c.Group != "" && c.Group != quorum.DefaultGroup
	switch c.Op {
	case quorum.OpAcquire, quorum.OpState, quorum.OpRenew:
		// The holder of a group other than the default one, which need
		// not lead raft, writes its own grant, states and renewals
		// through the leader (the state machine checks the rest: the
		// placement, the epoch, the holder).
		c.Reason = boundText(c.Reason, maxForwardedText)
		return named && c.Node == from
	case quorum.OpPlace:
		// Such a holder hands its group on: only a group placed on it
		// (From; the state machine refuses it otherwise).
		return named && c.From == from
	}
	switch c.Op {
	case quorum.OpRelease, quorum.OpUnclean:
		if c.Op == quorum.OpUnclean {
			c.Reason = boundText(c.Reason, maxForwardedText)
		}
		return c.Node == from
	case quorum.OpRecord:
		r := c.Record
		if r == nil || r.ID != 0 || r.Kind != fencing.KindUnfence || r.Action != fencing.ActionOn ||
			r.Target != from || r.Executor != from || len(r.Attempts) > maxForwardedAttempts {
			return false
		}
		switch r.Outcome {
		case fencing.OutcomeSuccess, fencing.OutcomeFailed, fencing.OutcomeUnknown:
		default:
			return false
		}
		r.RequestedBy = from + " (start)"
		r.Reason = boundText(r.Reason, api.MaxReason)
		r.Error = boundText(r.Error, maxForwardedText)
		for i := range r.Attempts {
			a := &r.Attempts[i]
			a.Error, a.Stderr = boundText(a.Error, maxForwardedText), boundText(a.Stderr, maxForwardedText)
		}
		return true
	}
	return false
}

// Bounds of a record another node forwards.
const (
	maxForwardedAttempts = 64
	maxForwardedText     = 4 << 10
)

// boundText cleans s of control characters and cuts it to at most n bytes.
func boundText(s string, n int) string {
	s = api.CleanText(s)
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}
