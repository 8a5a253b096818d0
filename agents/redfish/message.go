package redfish

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/stmcginnis/gofish/schemas"
)

// The BMC's own words in our errors. A Redfish error says what went wrong
// in error.message and in each @Message.ExtendedInfo entry (MessageId and
// Message); BMCs differ in which they fill (sushy-tools puts the one
// useful sentence, "Incorrect username or password", in error.message
// and a bare Base.1.0.GeneralError in ExtendedInfo), so the summary keeps
// every message with its ID, each once. It is the BMC's text, so it is
// cleaned before it is shown: control and format characters become
// spaces (no forged log lines, no terminal escapes, no reordered text),
// our secrets are cut out wherever a BMC echoed one, and it is bounded.
const (
	maxMessagePart = 200 // bytes of one message
	maxMessage     = 360 // bytes of the whole summary
)

// httpError is a non-success HTTP answer, summarised from its Redfish error
// body.
type httpError struct {
	Status int
	Msg    string
	// ids are the answer's error.code and MessageIds; words its messages
	// in lower case (bounded, not shown): what recognises an answer.
	ids   []string
	words string
}

func (e *httpError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Msg)
}

// fromGofish turns gofish's error (which carries the raw body) into an
// httpError with a one-line summary from which secrets are removed.
func fromGofish(err error, secrets ...string) error {
	var re *schemas.Error
	if !errors.As(err, &re) || re.HTTPReturnedStatusCode == 0 {
		return err
	}
	he := &httpError{Status: re.HTTPReturnedStatusCode, Msg: summarizeError(re, secrets)}
	var words []string
	add := func(id, msg string) {
		if id != "" {
			he.ids = append(he.ids, clean(id, maxMessagePart, secrets))
		}
		if msg != "" {
			words = append(words, clean(msg, maxMessagePart, secrets))
		}
	}
	add(re.Code, re.Message)
	for _, m := range re.ExtendedInfos {
		add(m.MessageID, m.Message)
	}
	he.words = strings.ToLower(strings.Join(words, " "))
	return he
}

// summarizeError lists each message of a Redfish error with its ID:
// error.code with error.message, then each ExtendedInfo MessageId with
// its Message. An entry that repeats another, or a top-level message that
// only points at ExtendedInfo ("See ExtendedInfo for more information"),
// is left out when ExtendedInfo says more.
func summarizeError(re *schemas.Error, secrets []string) string {
	type entry struct{ id, msg string }
	var ext []entry
	for _, m := range re.ExtendedInfos {
		e := entry{clean(m.MessageID, maxMessagePart, secrets), clean(m.Message, maxMessagePart, secrets)}
		if e.id != "" || e.msg != "" {
			ext = append(ext, e)
		}
	}
	top := entry{clean(re.Code, maxMessagePart, secrets), clean(re.Message, maxMessagePart, secrets)}
	extSays := false
	for _, e := range ext {
		extSays = extSays || e.msg != ""
	}
	entries := ext
	if top.id != "" || top.msg != "" {
		pointer := strings.Contains(strings.ToLower(top.msg), "extendedinfo")
		if !(extSays && (top.msg == "" || pointer)) {
			entries = append([]entry{top}, ext...)
		}
	}
	var parts []string
	seen := map[string]bool{}
	for i, e := range entries {
		part := e.id
		switch {
		case e.id != "" && e.msg != "":
			part = e.id + ": " + e.msg
		case e.msg != "":
			part = e.msg
		}
		// An ID alone that an entry before it already gave with its
		// message (sushy's Base.1.0.GeneralError) adds nothing.
		if e.msg == "" && i > 0 && seen[e.id] {
			continue
		}
		if seen[part] {
			continue
		}
		seen[part], seen[e.id] = true, true
		parts = append(parts, part)
	}
	return bound(strings.Join(parts, "; "), maxMessage)
}

// clean makes text from the BMC fit for an error message: each secret is
// replaced (before anything is cut, so no part of one survives), control
// and format characters and invalid UTF-8 become spaces, runs of spaces
// one, and the result is bounded to max bytes.
func clean(s string, max int, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	var b strings.Builder
	space := false
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return bound(b.String(), max)
}

// bound cuts s to at most max bytes on a rune boundary, marking the cut.
func bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// hasID reports whether the answer carries a message whose ID ends in
// name (the registry prefix and version vary: Base.1.8.X, iLO.2.14.X).
func (e *httpError) hasID(name string) bool {
	for _, id := range e.ids {
		if id == name || strings.HasSuffix(id, "."+name) {
			return true
		}
	}
	return false
}

// noSlotError is a login refused because every session slot of the BMC is
// taken. It is not retried within an operation: slots free up when their
// sessions log out or expire, minutes rather than milliseconds away.
type noSlotError struct{ answer *httpError }

func (e *noSlotError) Error() string {
	return "the BMC has no free session slot (" + e.answer.Error() + "); sessions left open by other clients, " +
		"or by a fenced that was killed, hold them until they are logged out or the BMC expires them"
}

func (e *noSlotError) Unwrap() error { return e.answer }

// asNoSlot recognises a login answer that says the session table is full:
// DSP0268's Base.SessionLimitExceeded or iDRAC's RAC0218, whatever the
// status; or, on an answer other than 401/403 (which is a refused
// password), a vendor's words for it ("maximum number of user sessions",
// "no sessions available", "insufficient resources"). It is only asked
// of the answer to a login, where a shortage can only be one of sessions.
func asNoSlot(err error) error {
	var he *httpError
	if !errors.As(err, &he) {
		return err
	}
	full := he.hasID("SessionLimitExceeded") || he.hasID("RAC0218")
	if !full && he.Status != http.StatusUnauthorized && he.Status != http.StatusForbidden {
		full = he.hasID("InsufficientResources") || strings.Contains(he.words, "insufficient resources")
	}
	if !full && he.Status != http.StatusUnauthorized && he.Status != http.StatusForbidden && strings.Contains(he.words, "session") {
		for _, w := range []string{"limit", "maximum", "too many", "no more", "no sessions available", "no session available", "no free"} {
			full = full || strings.Contains(he.words, w)
		}
	}
	if !full {
		return err
	}
	return &noSlotError{answer: he}
}

func isNoSlot(err error) bool {
	var ns *noSlotError
	return errors.As(err, &ns)
}
