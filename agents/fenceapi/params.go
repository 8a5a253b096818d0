package fenceapi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fenced/fenced/agents"
)

// Limits on stdin parameters: a fence agent's input is a handful of short
// lines, and anything far larger is a mistake, not a configuration.
const (
	maxParamBytes = 1 << 20
	maxLineBytes  = 64 << 10
)

// ParseParams reads FenceAgentAPI parameters: one name=value per line,
// blank lines and lines starting with # ignored, surrounding whitespace
// stripped, the value taken verbatim after the first "=". A name given twice
// keeps the last value, as fence-agents do. Errors name the line but never
// echo its content, which may be a password.
func ParseParams(r io.Reader) (agents.Params, error) {
	p := agents.Params{}
	sc := bufio.NewScanner(io.LimitReader(r, maxParamBytes+1))
	sc.Buffer(make([]byte, 0, 4096), maxLineBytes)
	total := 0
	for n := 1; sc.Scan(); n++ {
		total += len(sc.Bytes()) + 1
		if total > maxParamBytes {
			return nil, fmt.Errorf("stdin: more than %d bytes of parameters", maxParamBytes)
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("stdin line %d: not name=value", n)
		}
		name = strings.TrimSpace(name)
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("stdin line %d: %w", n, err)
		}
		if strings.ContainsRune(value, 0) {
			return nil, fmt.Errorf("stdin line %d: parameter %s: value contains a NUL byte", n, name)
		}
		p[name] = value
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("stdin: a line is longer than %d bytes", maxLineBytes)
		}
		return nil, fmt.Errorf("stdin: %w", err)
	}
	return p, nil
}

// checkName accepts fence-agents parameter names: letters, digits, _ and -.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty parameter name")
	}
	if len(name) > 64 {
		return errors.New("parameter name longer than 64 characters")
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return fmt.Errorf("parameter name %q: only letters, digits, _ and - are allowed", name)
		}
	}
	return nil
}

// shortFlags are fence-agents' one-letter options that fenced agents take.
// Secrets have no short form here: see parseArgs.
var shortFlags = map[string]string{
	"o": "action", "n": "nodename", "a": "ip", "l": "username", "u": "ipport",
	"P": "lanplus", "C": "cipher", "L": "privlvl", "m": "method", "S": "password_script",
}

// parseArgs reads fence-agents style options: --name=value, --name value,
// --flag (boolean), -o ACTION and the other short forms. Dashes in long
// names become underscores (--hexadecimal-kg). Secrets are refused on the
// command line, where any user can read them from the process list. params
// are the agent's parameters (for booleans and secrets).
func parseArgs(args []string, params []agents.Param) (agents.Params, error) {
	p := agents.Params{}
	decl := map[string]agents.Param{}
	for _, d := range params {
		decl[d.Name] = d
		for _, a := range d.Aliases {
			decl[a] = d
		}
	}
	isBool := func(name string) bool {
		d, ok := decl[name]
		return ok && d.Type == "boolean"
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		var name, value string
		hasValue := false
		switch {
		case strings.HasPrefix(arg, "--") && len(arg) > 2:
			name, value, hasValue = strings.Cut(arg[2:], "=")
			name = strings.ReplaceAll(name, "-", "_")
		case strings.HasPrefix(arg, "-") && len(arg) >= 2:
			long, ok := shortFlags[arg[1:2]]
			if !ok {
				return nil, fmt.Errorf("option %s: unknown", arg[:2])
			}
			name = long
			if len(arg) > 2 {
				value, hasValue = arg[2:], true
			}
		default:
			return nil, fmt.Errorf("argument %q: expected --name=value or -o ACTION", arg)
		}
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("option --%s: %w", name, err)
		}
		if d, ok := decl[name]; ok && d.Secret || strings.HasSuffix(name, "password") || name == "passwd" {
			return nil, fmt.Errorf("option --%s: secrets are not accepted on the command line (visible in the process list); pass it on stdin or use --%s-file", name, strings.ReplaceAll(name, "_", "-"))
		}
		if !hasValue {
			if isBool(name) {
				value = "1"
			} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
				value = args[i]
			} else if name == "help" || name == "version" {
				value = "1"
			} else {
				return nil, fmt.Errorf("option --%s: needs a value", name)
			}
		}
		p[name] = value
	}
	return p, nil
}

// ownArgs picks out of fence-agents style options the values of the given
// parameters only (--name=value or --name value), leaving the rest for
// parseArgs once the whole parameter set is known.
func ownArgs(args []string, own []agents.Param) agents.Params {
	names := map[string]string{}
	for _, d := range own {
		names[d.Name] = d.Name
		for _, a := range d.Aliases {
			names[a] = d.Name
		}
	}
	p := agents.Params{}
	for i, arg := range args {
		if !strings.HasPrefix(arg, "--") {
			continue
		}
		name, value, hasValue := strings.Cut(arg[2:], "=")
		canon, ok := names[strings.ReplaceAll(name, "-", "_")]
		if !ok {
			continue
		}
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
		}
		p[canon] = value
	}
	return p
}
