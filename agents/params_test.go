package agents

import (
	"strings"
	"testing"
	"time"
)

func TestSecondsBounds(t *testing.T) {
	cases := []struct {
		v    string
		want time.Duration
		err  string
	}{
		{"5", 5 * time.Second, ""},
		{"0.25", 250 * time.Millisecond, ""},
		{"1500ms", 1500 * time.Millisecond, ""},
		{"86400", 24 * time.Hour, ""},
		{"86401", 0, "more than 24h0m0s"},
		{"1e12", 0, "more than"}, // once wrapped to a negative duration
		{"inf", 0, "not a duration"},
		{"NaN", 0, "not a duration"},
		{"-1", 0, "negative"},
		{"2562047h", 0, "more than"},
	}
	for _, c := range cases {
		got, err := Params{"x": c.v}.Seconds("x", time.Second)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %v %v, want %v", c.v, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v %v, want an error containing %q", c.v, got, err, c.err)
		}
	}
}
