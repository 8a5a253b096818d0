package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestDecodeAdminRequest(t *testing.T) {
	cases := []struct {
		body string
		want AdminRequest
		err  string
	}{
		{`{"node":"node2","reason":"disk full"}`, AdminRequest{Node: "node2", Reason: "disk full"}, ""},
		{`{"node":"node2","action":"reboot","flag":true}`, AdminRequest{Node: "node2", Action: "reboot", Flag: true}, ""},
		{`{"node":"n","reason":"a\u001b[2J\r\nb\tc\u0007\u202e"}`, AdminRequest{Node: "n", Reason: "a[2J  b c"}, ""},
		{`{"node":"n","reason":"  padded  "}`, AdminRequest{Node: "n", Reason: "padded"}, ""},
		{`{"node":"n","requestedBy":"root\u001b@node1"}`, AdminRequest{Node: "n", RequestedBy: "root@node1"}, ""},
		{``, AdminRequest{}, "request body: empty, want a JSON object"},
		{`{"node":`, AdminRequest{}, "request body: truncated JSON"},
		{`{"node" 1}`, AdminRequest{}, "request body: invalid JSON at byte 9"},
		{`[1]`, AdminRequest{}, "request body: want a JSON object, got array"},
		{`{"node":1}`, AdminRequest{}, "request body: field node: want string, got number"},
		{`{"node":"a"} {"node":"b"}`, AdminRequest{}, "request body: data after the JSON object"},
		{`{"node":"n","reason":"` + strings.Repeat("x", MaxReason+1) + `"}`, AdminRequest{}, "reason: 1025 bytes, at most 1024"},
		{`{"node":"` + strings.Repeat("x", 300) + `"}`, AdminRequest{}, "node: 300 bytes, at most 256"},
		{`{"node":"n","action":"` + strings.Repeat("x", 17) + `"}`, AdminRequest{}, "action: 17 bytes, at most 16"},
	}
	for _, tc := range cases {
		got, err := DecodeAdminRequest([]byte(tc.body))
		msg := ""
		if err != nil {
			msg = err.Error()
			var re *RequestError
			if !errors.As(err, &re) {
				t.Errorf("%.40q: error %T, want *RequestError", tc.body, err)
			}
		}
		if msg != tc.err || got != tc.want {
			t.Errorf("%.60q:\n got %+v %q\nwant %+v %q", tc.body, got, msg, tc.want, tc.err)
		}
	}
}

func TestEscapeText(t *testing.T) {
	cases := map[string]string{
		"plain text, ünïcode": "plain text, ünïcode",
		"a\x1b[31mb":          `a\x1b[31mb`,
		"line\r\nfake row":    `line\x0d\x0afake row`,
		"tab\there":           `tab\x09here`,
		"bidi\u202eevil":      `bidi\u202eevil`,
		"c1\u009bx":           `c1\x9bx`,
		"bad\xffutf8":         `bad\xffutf8`,
	}
	for in, want := range cases {
		if got := EscapeText(in); got != want {
			t.Errorf("EscapeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// clean reports the first rune of s a terminal would act on or hide.
func clean(s string) (rune, bool) {
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return r, false
		}
	}
	return 0, utf8.ValidString(s)
}

// FuzzDecodeAdminRequest: any body — from a local client or forwarded by
// another node — decodes to a bounded, printable request or to a
// RequestError; never a panic, and a decoded request survives a round trip
// unchanged (what the follower forwards, the leader reads the same).
func FuzzDecodeAdminRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeAdminRequest(body)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Msg == "" {
				t.Fatalf("error %T %q, want a *RequestError with a message", err, err)
			}
			if req != (AdminRequest{}) {
				t.Fatalf("error %q with a non-empty request %+v", err, req)
			}
			return
		}
		for name, v := range map[string]string{"reason": req.Reason, "requestedBy": req.RequestedBy} {
			if r, ok := clean(v); !ok {
				t.Fatalf("%s %q keeps %U", name, v, r)
			}
		}
		if len(req.Reason) > MaxReason || len(req.Node) > maxName || len(req.RequestedBy) > maxName {
			t.Fatalf("over bounds: %+v", req)
		}
		again, _ := json.Marshal(req)
		back, err := DecodeAdminRequest(again)
		if err != nil || back != req {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", req, again, back, err)
		}
	})
}

// FuzzText: CleanText leaves nothing a terminal acts on and is stable;
// EscapeText leaves no control character and keeps printable text as is.
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "disk full", "a\x1b[2Jb", "\r\n\t", "\u202e\u200b", "\xff\xfe", "ü\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := CleanText(s)
		if r, ok := clean(c); !ok {
			t.Fatalf("CleanText(%q) = %q keeps %U", s, c, r)
		}
		if CleanText(c) != c {
			t.Fatalf("CleanText not stable on %q", c)
		}
		e := EscapeText(s)
		if r, ok := clean(e); !ok {
			t.Fatalf("EscapeText(%q) = %q keeps %U", s, e, r)
		}
		if EscapeText(c) != c {
			t.Fatalf("EscapeText changed clean text %q to %q", c, EscapeText(c))
		}
	})
}
