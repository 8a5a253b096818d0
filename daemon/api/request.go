package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on what an admin request may carry. Everything in a request ends
// up in the replicated log on every node and in every node's log, so the
// API refuses more rather than storing it.
const (
	// MaxRequestBody is the largest request body the API reads.
	MaxRequestBody = 64 << 10
	// MaxReason is the longest reason recorded with a fence, unfence or
	// confirmation, in bytes after cleaning.
	MaxReason = 1024
	// maxName bounds node names and the requester (user@node).
	maxName = 256
)

// AdminRequest is the body of the fence, unfence, confirm, standby and
// transfer calls, and of their form forwarded to the leader.
type AdminRequest struct {
	Node        string `json:"node"`
	Action      string `json:"action,omitempty"` // fence: off (default) or reboot
	Reason      string `json:"reason,omitempty"`
	RequestedBy string `json:"requestedBy,omitempty"` // set by the node asked, from the caller's credentials
	Flag        bool   `json:"flag,omitempty"`        // standby on/off
}

// RequestError is a request the API refuses to read: malformed, too large,
// or with a field out of bounds. Its text names the field.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

// DecodeAdminRequest reads one admin request from body: the API's POST
// bodies and the requests other nodes forward use it alike. Text fields
// are cleaned of control characters (see CleanText) and bounded, so what
// reaches the logs and the replicated history is printable and small.
func DecodeAdminRequest(body []byte) (AdminRequest, error) {
	var req AdminRequest
	if len(body) > MaxRequestBody {
		return req, &RequestError{fmt.Sprintf("request body: %d bytes, at most %d", len(body), MaxRequestBody)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return AdminRequest{}, &RequestError{"request body: " + jsonProblem(err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return AdminRequest{}, &RequestError{"request body: data after the JSON object"}
	}
	req.Reason = CleanText(req.Reason)
	if len(req.Reason) > MaxReason {
		return AdminRequest{}, &RequestError{fmt.Sprintf("reason: %d bytes, at most %d", len(req.Reason), MaxReason)}
	}
	req.RequestedBy = CleanText(req.RequestedBy)
	// The node and the action are matched against the configuration and
	// a fixed set; they are only bounded here.
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{{"node", req.Node, maxName}, {"action", req.Action, 16}, {"requestedBy", req.RequestedBy, maxName}} {
		if len(f.v) > f.max {
			return AdminRequest{}, &RequestError{fmt.Sprintf("%s: %d bytes, at most %d", f.name, len(f.v), f.max)}
		}
	}
	return req, nil
}

// jsonProblem says what is wrong with a JSON body without echoing it.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "empty, want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("want a JSON object, got %s", te.Value)
		}
		return fmt.Sprintf("field %s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}

// CleanText makes s safe to print on a terminal and in a one-line log or
// table cell: invalid UTF-8 becomes U+FFFD, line breaks and tabs become
// spaces, and other control characters (ESC, BEL, DEL, C1) and the
// invisible formatting characters that reorder or hide text (bidi
// overrides, zero-width marks) are dropped. Surrounding space is trimmed.
func CleanText(s string) string {
	if utf8.ValidString(s) && !hasControl(s) && strings.TrimSpace(s) == s {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f':
			b.WriteByte(' ')
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// hasControl reports whether s holds a control or invisible formatting
// character.
func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return true
		}
	}
	return false
}

// EscapeText shows every control or invisible formatting character of s
// as a Go escape (\x1b, \r, \u202e) and every invalid byte as \xNN, so
// text stored before it was cleaned prints as one harmless line.
func EscapeText(s string) string {
	if utf8.ValidString(s) && !hasControl(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

// AdminTimeout bounds an admin request (fence, unfence, confirm, standby,
// transfer) on the daemon; the answer comes within it.
const AdminTimeout = 10 * time.Minute
