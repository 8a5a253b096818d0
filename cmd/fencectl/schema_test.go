package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const schemaDir = "../../docs/schema"

// compileSchema compiles docs/schema/NAME (with the files it refers to).
func compileSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(schemaDir, name))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	s, err := c.Compile(abs)
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	return s
}

// checkSchema validates one JSON document (fencectl's real output)
// against docs/schema/NAME.
func checkSchema(t *testing.T, name, doc string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Errorf("%s: output is not JSON: %v\n%s", name, err, doc)
		return
	}
	if err := compileSchema(t, name).Validate(v); err != nil {
		t.Errorf("output does not match %s: %#v\n%s", name, err, doc)
	}
}

// checkSchemaLines validates every line of out (status --watch -o json).
func checkSchemaLines(t *testing.T, name, out string) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		checkSchema(t, name, sc.Text())
		n++
	}
	return n
}

// Every published schema compiles, and each is the schema of a command.
func TestSchemasCompile(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	if err != nil || len(files) < 9 {
		t.Fatalf("schemas: %v %v", files, err)
	}
	for _, f := range files {
		compileSchema(t, filepath.Base(f))
	}
	// A document with a field the schema does not know fails: the
	// schemas cannot silently fall behind the output.
	v, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"schemaVersion":1,"node":"a","standby":true,"extra":1}`))
	if compileSchema(t, "standby.json").Validate(v) == nil {
		t.Error("standby.json accepts an unknown field")
	}
	if _, err := os.Stat(filepath.Join(schemaDir, "README.md")); err != nil {
		t.Error(fmt.Errorf("docs/schema has no README: %w", err))
	}
}
