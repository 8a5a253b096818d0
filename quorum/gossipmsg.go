package quorum

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// decodeRPC decodes a forwarded request or reply and refuses one that
// could not have come from Call or a reply to it: no ID, no sender, or a
// request without a method.
func decodeRPC(b []byte) (rpcMsg, error) {
	var msg rpcMsg
	if err := json.Unmarshal(b, &msg); err != nil {
		return rpcMsg{}, fmt.Errorf("undecodable message (%d bytes): %w", len(b), err)
	}
	switch {
	case msg.ID == 0:
		return rpcMsg{}, errors.New("message without an id")
	case msg.From == "":
		return rpcMsg{}, fmt.Errorf("message %d without a sender", msg.ID)
	case !msg.Reply && msg.Method == "":
		return rpcMsg{}, fmt.Errorf("request %d from %s without a method", msg.ID, msg.From)
	}
	return msg, nil
}

// encodeReply encodes a reply; one too large for a gossip message becomes
// an error reply saying so, so the caller learns why instead of waiting
// for an answer the receiver would refuse.
func encodeReply(r rpcMsg) []byte {
	out, err := json.Marshal(r)
	if err == nil && len(out) <= maxRPCMessage {
		return out
	}
	if err == nil {
		err = fmt.Errorf("reply of %d bytes exceeds the gossip message limit of %d", len(out), maxRPCMessage)
	}
	out, _ = json.Marshal(rpcMsg{ID: r.ID, Reply: true, From: r.From, Err: err.Error()})
	return out
}

// sendMsg sends msg to n over memberlist's reliable (TCP) messages,
// refusing one the receiver would refuse for its size (maxGossipFrame).
func (m *Membership) sendMsg(n *memberlist.Node, msg []byte) error {
	if len(msg) > maxRPCMessage {
		return fmt.Errorf("message of %d bytes exceeds the gossip message limit of %d", len(msg), maxRPCMessage)
	}
	return m.ml.SendReliable(n, msg)
}

// decodeMeta decodes a node's advertised metadata; on error it returns the
// zero Meta, never a half-decoded one.
func decodeMeta(b []byte) (Meta, error) {
	var meta Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		return Meta{}, fmt.Errorf("node metadata: %w", err)
	}
	return meta, nil
}
