package config

import "testing"

// An unknown key is reported at its own path's parent, whatever else the
// line holds: a value list or mapping after it, or siblings in flow style.
func TestUnknownKeyPath(t *testing.T) {
	cases := []struct {
		yaml string
		line int
		path string
	}{
		{"version: 1\na: 1\n", 2, ""},
		{"version: 1\na: [1]\n", 2, ""},
		{"version: 1\na: {b: 1}\n", 2, ""},
		{"{a: 1, version: 1}\n", 1, ""},
		{"version: 1\ncluster: {name: x, colour: red}\n", 2, "cluster"},
		{"version: 1\ncluster:\n  name: x\n  colour: [red]\n", 4, "cluster"},
		{"version: 1\nnodes:\n  - {name: a, colour: red}\n", 3, "nodes[0]"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.yaml), "f.yaml")
		ps, _ := err.(Problems)
		if len(ps) != 1 || ps[0].Line != tc.line || ps[0].Path != tc.path {
			t.Errorf("%q: problems %q, want one at line %d, path %q", tc.yaml, ps, tc.line, tc.path)
		}
	}
}
