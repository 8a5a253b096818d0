package agents

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Params are an agent's parameters as name=value strings, the way the
// FenceAgentAPI passes them. Names are the fence-agents names (ip, ipport,
// username, password, plug, ...).
type Params map[string]string

// Get returns the value of name, or of the first alias set.
func (p Params) Get(name string, aliases ...string) (string, bool) {
	if v, ok := p[name]; ok {
		return v, true
	}
	for _, a := range aliases {
		if v, ok := p[a]; ok {
			return v, true
		}
	}
	return "", false
}

// String returns name's value or def.
func (p Params) String(name, def string) string {
	if v, ok := p[name]; ok && v != "" {
		return v
	}
	return def
}

// Bool parses name as a fence-agents boolean ("1", "true", "yes", "on" or an
// empty value meaning the flag was given).
func (p Params) Bool(name string, def bool) (bool, error) {
	v, ok := p[name]
	if !ok {
		return def, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("parameter %s: %q is not a boolean", name, v)
}

// Int parses name as an integer.
func (p Params) Int(name string, def int) (int, error) {
	v, ok := p[name]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("parameter %s: %q is not an integer", name, v)
	}
	return n, nil
}

// MaxDuration bounds every duration parameter: no device wait is longer
// than a day, and a larger number would overflow a time.Duration.
const MaxDuration = 24 * time.Hour

// Seconds parses name as a duration: a number of seconds (fence-agents
// style, fractions allowed) or a Go duration ("500ms").
func (p Params) Seconds(name string, def time.Duration) (time.Duration, error) {
	v, ok := p[name]
	if !ok || v == "" {
		return def, nil
	}
	v = strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return 0, fmt.Errorf("parameter %s: %q is not a duration in seconds", name, v)
		case f < 0:
			return 0, fmt.Errorf("parameter %s: %q is negative", name, v)
		case f > MaxDuration.Seconds():
			return 0, fmt.Errorf("parameter %s: %q is more than %s", name, v, MaxDuration)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("parameter %s: %q is not a duration in seconds", name, v)
	}
	if d > MaxDuration {
		return 0, fmt.Errorf("parameter %s: %q is more than %s", name, v, MaxDuration)
	}
	return d, nil
}

// Secret resolves a secret parameter: the value of name itself, else the
// first line of the file named by name+"_file", else the first line printed
// by the command in name+"_script" (run without a shell argument list being
// visible to other users: the script is run through /bin/sh -c). Errors name
// the parameter and the file, never the secret.
func (p Params) Secret(ctx context.Context, name string) (string, error) {
	if v, ok := p[name]; ok {
		return v, nil
	}
	if f, ok := p[name+"_file"]; ok && f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("parameter %s_file: %w", name, err)
		}
		return firstLine(string(b)), nil
	}
	if s, ok := p[name+"_script"]; ok && s != "" {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", s).Output()
		if err != nil {
			return "", fmt.Errorf("parameter %s_script: %w", name, err)
		}
		v := firstLine(string(out))
		rememberScriptSecret(v)
		return v, nil
	}
	return "", nil
}

// scriptSecretsMax bounds how many values of _script forms a process
// remembers (the newest are kept).
const scriptSecretsMax = 256

// scriptSecrets are the values the _script forms printed in this process:
// a secret the configuration does not hold, which what is shown to
// someone else (a diagnostics bundle) must still be scrubbed of.
var scriptSecrets struct {
	mu     sync.Mutex
	values []string
}

func rememberScriptSecret(v string) {
	if v == "" {
		return
	}
	s := &scriptSecrets
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.values, v); i >= 0 {
		s.values = slices.Delete(s.values, i, i+1)
	}
	s.values = append(s.values, v)
	if over := len(s.values) - scriptSecretsMax; over > 0 {
		s.values = slices.Delete(s.values, 0, over)
	}
}

// ScriptSecrets returns what the _script forms of secret parameters
// printed in this process, newest last (at most 256 values).
func ScriptSecrets() []string {
	s := &scriptSecrets
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.values)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimRight(s, "\r")
}

// Precedence says which value a parameter takes when it is given under more
// than one of its names, Name and then Aliases in their order.
type Precedence int

const (
	// FirstGiven: the first name given, even with an empty value (an
	// empty ip is an empty ip, not a cue to read ipaddr).
	FirstGiven Precedence = iota
	// FirstNonEmpty: the first name given a value; empty when every name
	// given is empty.
	FirstNonEmpty
	// LastGiven: the last name given (an alias over the name).
	LastGiven
)

// target is the parameter every agent takes for its target (besides
// nodename, a fallback some agents read on their own): plug, or port.
var target = Param{Name: "plug", Aliases: []string{"port"}}

// Resolve checks p against decl as Check does, and returns it with every
// declared parameter under its Name alone: a value given under an alias
// is moved to the Name, by the parameter's Precedence, and no alias is
// left, so that an agent reads each parameter by one name. The target
// (plug, else port: the first given) is resolved the same way unless decl
// declares plug or port itself. Names decl does not declare are kept as
// they are. p is not changed.
func Resolve(p Params, decl []Param) (Params, []error) {
	errs := Check(p, decl)
	out := make(Params, len(p))
	for name, v := range p {
		out[name] = v
	}
	own := false
	for _, d := range decl {
		resolve(p, out, d)
		own = own || d.Name == target.Name || slices.Contains(target.Aliases, d.Name)
	}
	if !own {
		resolve(p, out, target)
	}
	return out, errs
}

// resolve sets out[d.Name] from d's names in p, and deletes its aliases.
func resolve(p, out Params, d Param) {
	var v string
	given := false
	for _, name := range append([]string{d.Name}, d.Aliases...) {
		w, ok := p[name]
		if !ok {
			continue
		}
		switch {
		case !given, d.Precedence == LastGiven, d.Precedence == FirstNonEmpty && v == "":
			v = w
		}
		given = true
		delete(out, name)
	}
	if given {
		out[d.Name] = v
	}
}

// Check verifies p against the declared parameters: required ones present
// (a secret counts as present through its _file or _script form), no unknown
// names. It reports every problem at once.
func Check(p Params, decl []Param) []error {
	var errs []error
	for _, d := range decl {
		if !d.Required {
			continue
		}
		if _, ok := p.Get(d.Name, d.Aliases...); ok {
			continue
		}
		if d.Secret && (p[d.Name+"_file"] != "" || p[d.Name+"_script"] != "") {
			continue
		}
		errs = append(errs, fmt.Errorf("parameter %s: required", d.Name))
	}
	unknown := Undeclared(p, decl)
	for _, name := range unknown {
		errs = append(errs, fmt.Errorf("parameter %s: unknown", name))
	}
	return errs
}

// Undeclared lists, sorted, the names in p that decl does not declare
// (counting aliases, the _file and _script forms of secrets, and the
// target and action names every agent takes).
func Undeclared(p Params, decl []Param) []string {
	known := map[string]bool{"action": true, "nodename": true}
	for _, d := range append([]Param{target}, decl...) {
		known[d.Name] = true
		for _, a := range d.Aliases {
			known[a] = true
		}
		if d.Secret {
			known[d.Name+"_file"] = true
			known[d.Name+"_script"] = true
		}
	}
	var unknown []string
	for name := range p {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	return unknown
}
