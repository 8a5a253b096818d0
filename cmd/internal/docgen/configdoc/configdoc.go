// Package configdoc writes the section 5 man page of a YAML configuration
// file from the Go types the file is decoded into. The keys, their nesting
// and types come from reflection on the value a file starts from (so the
// defaults shown are the ones the decoder really keeps), the prose from the
// doc comments of those types in their source (go/parser, go/doc/comment).
// Both are read when the page is generated: a field added to the
// configuration appears in the page without anyone editing the page.
package configdoc

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Page describes the page to write. Name, Section, Title and Root are
// required.
type Page struct {
	Name    string // "fenced.yaml": the page's name and the file it documents
	Section string // "5"
	Title   string // the NAME line after the dash
	Source  string // footer: "fenced v1.2.3"
	Manual  string // header: "fenced manual"
	Date    time.Time
	// Synopsis is the SYNOPSIS line, usually the file's path.
	Synopsis string
	// Description paragraphs (plain text) open the page.
	Description []string
	// Examples follow the keys: each a paragraph and a file (or commands)
	// shown as is.
	Examples []Example
	// Files and SeeAlso end it: FILES entries path -> what, in order, and
	// page references such as "fenced(8)".
	Files   [][2]string
	SeeAlso []string

	// Root is the configuration a file starts from, with its defaults: a
	// struct or a pointer to one.
	Root any
	// Dir returns the source directory of the package with the given import
	// path; nil asks `go list` (run inside the module).
	Dir func(importPath string) (string, error)
}

// Example is one entry of EXAMPLES: what it shows, and the text shown.
type Example struct {
	Text string // plain text
	Code string // shown verbatim, lines kept
}

// Key is one documented configuration key.
type Key struct {
	// Path from the top of the file: "timing.lease", "nodes[].gossip"
	// (every entry of a list), "devices.NAME.agent" (every entry of a
	// mapping keyed by names the file chooses).
	Path string
	// Type in the file's terms: "string", "duration", "list of mappings".
	Type string
	// Default is the value a file that leaves the key out gets, "" when
	// that is the empty value. Booleans always show theirs.
	Default string
	// Doc is the key's doc comment with Go field names replaced by keys;
	// "" when its source has none.
	Doc string
	// Children are the keys inside a mapping (or inside each entry of a
	// list or mapping of mappings).
	Children []*Key

	doc   *comment.Doc
	scope map[string]string // Go identifier -> key name, for Doc
}

// Keys returns the key tree of p.Root, in field order.
func (p *Page) Keys() ([]*Key, error) {
	rv := reflect.ValueOf(p.Root)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil, errors.New("configdoc: Root is a nil pointer")
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil, fmt.Errorf("configdoc: Root is a %s, want a struct", rv.Type())
	}
	w := &walker{dir: p.Dir, srcs: map[string]*pkgSource{}, active: map[reflect.Type]bool{}}
	if w.dir == nil {
		w.dir = goListDir
	}
	return w.fields(rv.Type(), rv, "")
}

// Undocumented lists the paths of keys whose source has no doc comment.
func Undocumented(keys []*Key) []string {
	var out []string
	var walk func([]*Key)
	walk = func(ks []*Key) {
		for _, k := range ks {
			if k.Doc == "" {
				out = append(out, k.Path)
			}
			walk(k.Children)
		}
	}
	walk(keys)
	return out
}

// Generate renders the page as roff (man macros).
func (p *Page) Generate() ([]byte, error) {
	if p.Name == "" || p.Section == "" || p.Title == "" {
		return nil, errors.New("configdoc: Page needs Name, Section and Title")
	}
	keys, err := p.Keys()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, ".TH %s %s %s %s %s\n.nh\n.ad l\n", quote(strings.ToUpper(p.Name)), quote(p.Section),
		quote(p.Date.UTC().Format("Jan 2006")), quote(p.Source), quote(p.Manual))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", escape(p.Name), escape(p.Title))
	if p.Synopsis != "" {
		fmt.Fprintf(&b, ".SH SYNOPSIS\n\\fB%s\\fR\n", escape(p.Synopsis))
	}
	if len(p.Description) > 0 {
		b.WriteString(".SH DESCRIPTION\n")
		for i, para := range p.Description {
			if i > 0 {
				b.WriteString(".PP\n")
			}
			b.WriteString(fill(escape(para)))
		}
	}
	b.WriteString(".SH KEYS\n")
	for _, k := range keys {
		fmt.Fprintf(&b, ".SS %s\n", quote(k.Path))
		writeDoc(&b, k, "("+summary(k)+")")
		writeChildren(&b, k.Children)
	}
	if len(p.Examples) > 0 {
		b.WriteString(".SH EXAMPLES\n")
		for i, e := range p.Examples {
			if i > 0 {
				b.WriteString(".PP\n")
			}
			b.WriteString(fill(escape(e.Text)))
			b.WriteString(".PP\n.EX\n")
			for _, l := range strings.Split(strings.TrimRight(e.Code, "\n"), "\n") {
				b.WriteString(escapeLine(l) + "\n")
			}
			b.WriteString(".EE\n")
		}
	}
	if len(p.Files) > 0 {
		b.WriteString(".SH FILES\n")
		for _, f := range p.Files {
			fmt.Fprintf(&b, ".TP\n\\fI%s\\fR\n%s", escape(f[0]), fill(escape(f[1])))
		}
	}
	if len(p.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		refs := make([]string, len(p.SeeAlso))
		for i, r := range p.SeeAlso {
			name, sec, ok := strings.Cut(strings.TrimSuffix(r, ")"), "(")
			if !ok {
				return nil, fmt.Errorf("configdoc: see-also %q: want NAME(SECTION)", r)
			}
			refs[i] = fmt.Sprintf("\\fB%s\\fR(%s)", escape(name), escape(sec))
		}
		b.WriteString(strings.Join(refs, ",\n") + "\n")
	}
	return b.Bytes(), nil
}

func writeChildren(b *bytes.Buffer, keys []*Key) {
	for _, k := range keys {
		b.WriteString(".TP\n")
		b.WriteString(keyTag(k.Path))
		if s := summary(k); s != "" {
			fmt.Fprintf(b, " (%s)", s)
		}
		b.WriteString("\n")
		writeDoc(b, k, "")
		writeChildren(b, k.Children)
	}
}

// summary is "type, default X" in roff.
func summary(k *Key) string {
	s := "\\fI" + escape(k.Type) + "\\fR"
	if k.Default != "" {
		s += ", default \\fB" + escape(k.Default) + "\\fR"
	}
	return s
}

// keyTag renders a path in bold with its NAME placeholders in italics.
func keyTag(path string) string {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		if p == mapPlaceholder {
			parts[i] = "\\fI" + p + "\\fB"
		} else {
			parts[i] = escape(p)
		}
	}
	return "\\fB" + strings.Join(parts, ".") + "\\fR"
}

// writeDoc renders k's doc comment: paragraphs, lists and code blocks. With
// a lead (a top-level key under its own heading), the lead opens the first
// paragraph; without, the doc is the body of a .TP entry, where blocks after
// the first need .IP to keep the indentation.
func writeDoc(b *bytes.Buffer, k *Key, lead string) {
	var blocks []comment.Block
	if k.doc != nil {
		blocks = k.doc.Content
	}
	if lead != "" {
		if len(blocks) == 0 {
			b.WriteString(fill(lead))
			return
		}
		if p, ok := blocks[0].(*comment.Paragraph); ok {
			b.WriteString(fill(lead + " " + renderText(p.Text, k.scope)))
			blocks = blocks[1:]
		} else {
			b.WriteString(fill(lead))
		}
	}
	for i, blk := range blocks {
		_, list := blk.(*comment.List)
		switch {
		case list: // its items make their own paragraphs
		case lead != "":
			b.WriteString(".PP\n")
		case i > 0:
			b.WriteString(".IP\n")
		}
		switch blk := blk.(type) {
		case *comment.Paragraph:
			b.WriteString(fill(renderText(blk.Text, k.scope)))
		case *comment.Heading:
			b.WriteString(fill("\\fB" + renderText(blk.Text, k.scope) + "\\fR"))
		case *comment.Code:
			b.WriteString(".nf\n")
			for _, line := range strings.Split(strings.TrimRight(blk.Text, "\n"), "\n") {
				b.WriteString(safeLine(escape(line)) + "\n")
			}
			b.WriteString(".fi\n")
		case *comment.List:
			b.WriteString(".RS\n")
			for _, it := range blk.Items {
				mark := "\\(bu"
				if it.Number != "" {
					mark = it.Number + "."
				}
				fmt.Fprintf(b, ".IP %s 4\n", mark)
				for j, c := range it.Content {
					if j > 0 {
						b.WriteString(".IP \"\" 4\n")
					}
					if p, ok := c.(*comment.Paragraph); ok {
						b.WriteString(fill(renderText(p.Text, k.scope)))
					}
				}
			}
			b.WriteString(".RE\n")
		}
	}
}

// renderText renders comment text as roff; Go identifiers in scope become
// their key names, in bold.
func renderText(ts []comment.Text, scope map[string]string) string {
	var b strings.Builder
	for _, t := range ts {
		switch t := t.(type) {
		case comment.Plain:
			b.WriteString(substitute(string(t), scope))
		case comment.Italic:
			b.WriteString("\\fI" + substitute(string(t), scope) + "\\fR")
		case *comment.Link:
			b.WriteString(renderText(t.Text, scope))
			if !t.Auto {
				b.WriteString(" <" + escape(t.URL) + ">")
			}
		case *comment.DocLink:
			b.WriteString(renderText(t.Text, scope))
		}
	}
	return b.String()
}

var reIdent = regexp.MustCompile(`\b[A-Za-z_][A-Za-z0-9_]*\b`)

// substitute escapes s and replaces the Go identifiers in scope (field
// names, the type's own name) with the key names a file uses.
func substitute(s string, scope map[string]string) string {
	var b strings.Builder
	last := 0
	for _, m := range reIdent.FindAllStringIndex(s, -1) {
		key, ok := scope[s[m[0]:m[1]]]
		if !ok {
			continue
		}
		b.WriteString(escape(s[last:m[0]]))
		b.WriteString("\\fB" + escape(key) + "\\fR")
		last = m[1]
	}
	b.WriteString(escape(s[last:]))
	return b.String()
}

// escape makes plain text safe in roff: backslashes, hyphens (shown as
// minus signs, so paths and flags can be copied), and non-ASCII characters
// as named Unicode escapes.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString("\\e")
		case r == '-':
			b.WriteString("\\-")
		case r == '\n' || r == '\t':
			b.WriteByte(' ')
		case r > 0x7e:
			fmt.Fprintf(&b, "\\[u%04X]", r)
		case r < 0x20:
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// escapeLine is escape for one line shown verbatim (in .EX): spaces kept,
// and a leading dot or quote not read as a request.
func escapeLine(s string) string {
	out := escape(s)
	if strings.HasPrefix(out, ".") || strings.HasPrefix(out, "'") {
		out = "\\&" + out
	}
	return out
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\(dq`) + `"` }

// fill collapses whitespace and wraps roff text at about 78 columns, never
// starting a line with a control character.
func fill(s string) string {
	words := strings.Fields(s)
	var b strings.Builder
	n := 0
	for _, w := range words {
		if n > 0 && n+1+len(w) > 78 {
			b.WriteString("\n")
			n = 0
		}
		if n > 0 {
			b.WriteString(" ")
			n++
		} else {
			w = safeLine(w)
		}
		b.WriteString(w)
		n += len(w)
	}
	if n > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

func safeLine(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return "\\&" + s
	}
	return s
}

// mapPlaceholder stands for the names a file chooses as keys of a mapping.
const mapPlaceholder = "NAME"

type walker struct {
	dir    func(string) (string, error)
	srcs   map[string]*pkgSource
	active map[reflect.Type]bool // struct types being walked (recursion guard)
}

// fields documents the keys of struct type t; v is its value in the
// defaults, or invalid inside a list or mapping entry (zero values then).
func (w *walker) fields(t reflect.Type, v reflect.Value, prefix string) ([]*Key, error) {
	if w.active[t] {
		return nil, nil
	}
	w.active[t] = true
	defer delete(w.active, t)

	src, err := w.typeSource(t)
	if err != nil {
		return nil, err
	}
	scope := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		if name, _, ok := yamlName(t.Field(i)); ok {
			scope[t.Field(i).Name] = name
		}
	}
	var keys []*Key
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, inline, ok := yamlName(f)
		if !ok {
			continue
		}
		var fv reflect.Value
		if v.IsValid() {
			fv = v.Field(i)
		}
		if inline {
			ft, fval := deref(f.Type, fv)
			if ft.Kind() != reflect.Struct {
				return nil, fmt.Errorf("configdoc: %s.%s: inline %s is not supported", t, f.Name, ft)
			}
			sub, err := w.fields(ft, fval, prefix)
			if err != nil {
				return nil, err
			}
			keys = append(keys, sub...)
			continue
		}
		k := &Key{Path: prefix + name}
		if src != nil {
			if text, ok := src.fields[f.Name]; ok && text != "" {
				k.setDoc(text, scope)
			} else if !ok {
				return nil, fmt.Errorf("configdoc: %s.%s: not in the source of %s (is the source of the same revision?)", t, f.Name, t.PkgPath())
			}
		}
		if err := w.describe(k, f.Type, fv); err != nil {
			return nil, fmt.Errorf("configdoc: %s: %w", k.Path, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// describe fills k's type, default and children from type t and default v.
func (w *walker) describe(k *Key, t reflect.Type, v reflect.Value) error {
	t, v = deref(t, v)
	if desc, ok := valueType(t); ok {
		k.Type = desc
		k.Default = defaultString(t, v)
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		k.Type = "mapping"
		w.docFromType(k, t, false)
		children, err := w.fields(t, v, k.Path+".")
		k.Children = children
		return err
	case reflect.Slice, reflect.Array:
		et, _ := deref(t.Elem(), reflect.Value{})
		if et.Kind() != reflect.Struct {
			return fmt.Errorf("list of %s is not supported", et)
		}
		k.Type = "list of mappings"
		w.docFromType(k, et, true)
		children, err := w.fields(et, reflect.Value{}, k.Path+"[].")
		k.Children = children
		return err
	case reflect.Map:
		et, _ := deref(t.Elem(), reflect.Value{})
		if _, ok := valueType(t.Key()); !ok || et.Kind() != reflect.Struct {
			return fmt.Errorf("mapping %s is not supported", t)
		}
		k.Type = "mapping of names to mappings"
		w.docFromType(k, et, true)
		children, err := w.fields(et, reflect.Value{}, k.Path+"."+mapPlaceholder+".")
		k.Children = children
		return err
	}
	return fmt.Errorf("%s is not supported", t)
}

// valueType describes types documented as one key: scalars, types that
// decode themselves, and lists and mappings of those ("list of strings",
// "mapping of strings to lists of durations"). ok is false for types with
// keys of their own inside (structs, and collections of structs).
func valueType(t reflect.Type) (desc string, ok bool) {
	t, _ = deref(t, reflect.Value{})
	if isLeaf(t) {
		return typeName(t), true
	}
	switch t.Kind() {
	case reflect.Interface:
		return "any value", true
	case reflect.Slice, reflect.Array:
		if e, ok := valueType(t.Elem()); ok {
			return "list of " + plural(e), true
		}
	case reflect.Map:
		kd, kok := valueType(t.Key())
		ed, eok := valueType(t.Elem())
		if kok && eok {
			return "mapping of " + plural(kd) + " to " + plural(ed), true
		}
	}
	return "", false
}

// docFromType gives a key whose field has no comment its type's doc comment.
// The type's name is read as the key ("Mount is a filesystem mount." under
// storage.mount), or, for the entries of a list or mapping, as "Each entry"
// ("Node is one configured node." under nodes).
func (w *walker) docFromType(k *Key, t reflect.Type, entries bool) {
	if k.doc != nil {
		return
	}
	src, err := w.typeSource(t)
	if err != nil || src == nil || src.doc == "" {
		return
	}
	text := src.doc
	scope := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		if n, _, ok := yamlName(t.Field(i)); ok {
			scope[t.Field(i).Name] = n
		}
	}
	if entries {
		if rest, ok := strings.CutPrefix(text, t.Name()+" "); ok {
			text = "Each entry " + rest
		}
	} else {
		scope[t.Name()] = k.Path[strings.LastIndex(k.Path, ".")+1:]
	}
	k.setDoc(text, scope)
}

func (k *Key) setDoc(text string, scope map[string]string) {
	var p comment.Parser
	k.doc = p.Parse(text)
	k.scope = scope
	var plain []string
	for _, blk := range k.doc.Content {
		if para, ok := blk.(*comment.Paragraph); ok {
			plain = append(plain, plainText(para.Text, scope))
		}
	}
	k.Doc = strings.Join(plain, "\n\n")
}

func plainText(ts []comment.Text, scope map[string]string) string {
	var b strings.Builder
	for _, t := range ts {
		switch t := t.(type) {
		case comment.Plain:
			b.WriteString(reIdent.ReplaceAllStringFunc(string(t), func(id string) string {
				if key, ok := scope[id]; ok {
					return key
				}
				return id
			}))
		case comment.Italic:
			b.WriteString(string(t))
		case *comment.Link:
			b.WriteString(plainText(t.Text, scope))
		case *comment.DocLink:
			b.WriteString(plainText(t.Text, scope))
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// yamlName is the key yaml.v3 decodes field f from: its tag's name, else the
// field name in lower case; ok is false for fields the decoder skips
// (unexported ones, embedded structs excepted, and "-").
func yamlName(f reflect.StructField) (name string, inline, ok bool) {
	if !f.IsExported() && !f.Anonymous {
		return "", false, false
	}
	tag := f.Tag.Get("yaml")
	if tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	for _, o := range strings.Split(opts, ",") {
		if o == "inline" {
			return "", true, true
		}
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false, true
}

func deref(t reflect.Type, v reflect.Value) (reflect.Type, reflect.Value) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
		if v.IsValid() {
			if v.IsNil() {
				v = reflect.Value{}
			} else {
				v = v.Elem()
			}
		}
	}
	return t, v
}

// isLeaf: scalars, and types that decode themselves from a scalar
// (UnmarshalYAML, UnmarshalText), such as durations.
func isLeaf(t reflect.Type) bool {
	if hasUnmarshal(t) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Slice, reflect.Array, reflect.Map, reflect.Interface:
		return false
	}
	return true
}

func typeName(t reflect.Type) string {
	if t.Name() != "" && hasUnmarshal(t) { // duration, time, ...
		return strings.ToLower(t.Name())
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	if t.Name() != "" {
		return strings.ToLower(t.Name())
	}
	return t.String()
}

func hasUnmarshal(t reflect.Type) bool {
	for _, m := range []string{"UnmarshalYAML", "UnmarshalText"} {
		if _, ok := reflect.PointerTo(t).MethodByName(m); ok {
			return true
		}
	}
	return false
}

// plural of a type description: "strings", "lists of strings".
func plural(s string) string {
	first, rest, _ := strings.Cut(s, " ")
	if rest != "" && (first == "list" || first == "mapping") {
		return first + "s " + rest
	}
	if strings.HasSuffix(s, "s") || s == "any value" {
		return s
	}
	return s + "s"
}

// defaultString shows v, the value a file without the key keeps; "" for
// the empty value (booleans excepted) and inside entries with no default.
func defaultString(t reflect.Type, v reflect.Value) string {
	if !v.IsValid() {
		v = reflect.Zero(t)
	}
	if t.Kind() == reflect.Bool {
		return strconv.FormatBool(v.Bool())
	}
	if v.IsZero() {
		return ""
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return ""
		}
		items := make([]string, v.Len())
		for i := range items {
			items[i] = scalarString(v.Index(i))
		}
		return "[" + strings.Join(items, ", ") + "]"
	case reflect.Map:
		if v.Len() == 0 {
			return ""
		}
		var items []string
		iter := v.MapRange()
		for iter.Next() {
			items = append(items, scalarString(iter.Key())+": "+scalarString(iter.Value()))
		}
		sort.Strings(items)
		return "{" + strings.Join(items, ", ") + "}"
	}
	return scalarString(v)
}

func scalarString(v reflect.Value) string {
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	if v.CanAddr() {
		if s, ok := v.Addr().Interface().(fmt.Stringer); ok {
			return s.String()
		}
	}
	return fmt.Sprint(v.Interface())
}

// pkgSource is what the parsed source says about one package's types.
type pkgSource struct {
	types map[string]*typeSource
}

type typeSource struct {
	doc    string
	fields map[string]string // field name -> doc comment ("" when none)
}

// typeSource returns the source description of named struct type t, or nil
// for types without a package (anonymous structs).
func (w *walker) typeSource(t reflect.Type) (*typeSource, error) {
	if t.PkgPath() == "" || t.Name() == "" {
		return nil, nil
	}
	src, ok := w.srcs[t.PkgPath()]
	if !ok {
		dir, err := w.dir(t.PkgPath())
		if err != nil {
			return nil, fmt.Errorf("configdoc: source of %s: %w", t.PkgPath(), err)
		}
		pkgName, _, _ := strings.Cut(t.String(), ".")
		if src, err = parseDir(dir, pkgName); err != nil {
			return nil, err
		}
		w.srcs[t.PkgPath()] = src
	}
	ts, ok := src.types[t.Name()]
	if !ok {
		return nil, fmt.Errorf("configdoc: type %s not found in the source of %s", t.Name(), t.PkgPath())
	}
	return ts, nil
}

// parseDir reads the type declarations of package pkgName in dir (test files
// of the same package included: their types can be documented too).
func parseDir(dir, pkgName string) (*pkgSource, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	src := &pkgSource{types: map[string]*typeSource{}}
	fset := token.NewFileSet()
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("configdoc: %w", err)
		}
		if f.Name.Name != pkgName {
			continue
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, dup := src.types[ts.Name.Name]; dup {
					continue
				}
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				t := &typeSource{doc: doc.Text(), fields: map[string]string{}}
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, fld := range st.Fields.List {
						text := fld.Doc.Text()
						if text == "" {
							text = fld.Comment.Text()
						}
						names := fld.Names
						if len(names) == 0 { // embedded
							names = []*ast.Ident{embeddedName(fld.Type)}
						}
						for _, n := range names {
							if n != nil {
								t.fields[n.Name] = text
							}
						}
					}
				}
				src.types[ts.Name.Name] = t
			}
		}
	}
	if len(src.types) == 0 {
		return nil, fmt.Errorf("configdoc: no Go source of package %s in %s", pkgName, dir)
	}
	return src, nil
}

func embeddedName(e ast.Expr) *ast.Ident {
	switch e := e.(type) {
	case *ast.Ident:
		return e
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel
	}
	return nil
}

// goListDir asks the go command (run inside the module) where a package's
// source is.
func goListDir(importPath string) (string, error) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", importPath).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go list %s: %w: %s", importPath, err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("go list %s: %w", importPath, err)
	}
	return strings.TrimSpace(string(out)), nil
}
