// Command copyright writes the copyright files of the fenced packages, in
// Debian's machine-readable format (DEP-5): the project's license, and for
// the Go standard library and every Go module linked into the packaged
// binaries — read from the binaries' own build information — the license
// its license file holds (identified with licensecheck), its copyright
// notices and its NOTICE file. build.sh runs it on the very binaries it
// packages, so the list cannot drift from what is shipped:
//
//	go run ./packaging/copyright --license LICENSE --deb OUT --full OUT --spdx OUT \
//	    /usr/sbin/fenced=BUILT-BINARY /usr/bin/fencectl=BUILT-BINARY
//
// --deb refers to the texts Debian ships in /usr/share/common-licenses;
// --full carries every text (for the rpm, whose systems have no such
// directory); --spdx gets the SPDX expression of everything linked in (the
// rpm's License tag). It runs inside the module: the modules' files come
// from the module cache through `go mod download`, which the build has
// already filled.
package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/google/licensecheck"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "copyright:", err)
		os.Exit(1)
	}
}

// Header is the upstream description in the header paragraph.
type Header struct {
	Name, Contact, Source, Copyright string
}

func run(args []string) error {
	fs := flag.NewFlagSet("copyright", flag.ContinueOnError)
	var h Header
	fs.StringVar(&h.Name, "name", "fenced", "Upstream-Name")
	fs.StringVar(&h.Contact, "contact", "", "Upstream-Contact (required)")
	fs.StringVar(&h.Source, "source", "", "Source: the project's address (required)")
	fs.StringVar(&h.Copyright, "copyright", "", "the project's copyright holders (required)")
	license := fs.String("license", "LICENSE", "the project's license file")
	debOut := fs.String("deb", "", "write the Debian copyright file (common licenses by reference) here")
	fullOut := fs.String("full", "", "write the copyright file with every license text here")
	spdxOut := fs.String("spdx", "", "write the SPDX license expression of the binaries here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if h.Contact == "" || h.Source == "" || h.Copyright == "" || fs.NArg() == 0 {
		return errors.New("usage: copyright --contact C --source URL --copyright HOLDERS [--license FILE] [--deb OUT] [--full OUT] [--spdx OUT] INSTALLED=BINARY [INSTALLED=BINARY ...]")
	}
	bins := make([][2]string, fs.NArg())
	for i, a := range fs.Args() {
		installed, file, ok := strings.Cut(a, "=")
		if !ok || installed == "" || file == "" {
			return fmt.Errorf("%q: want INSTALLED-PATH=BUILT-BINARY", a)
		}
		bins[i] = [2]string{installed, file}
	}
	parts, err := Collect(bins, *license, goModDirs, goRoot)
	if err != nil {
		return err
	}
	outputs := []struct {
		path string
		body func() []byte
	}{
		{*debOut, func() []byte { return Render(h, parts, DebianCommonLicenses, true) }},
		{*fullOut, func() []byte { return Render(h, parts, DebianCommonLicenses, false) }},
		{*spdxOut, func() []byte { return []byte(SPDX(parts) + "\n") }},
	}
	for _, o := range outputs {
		if o.path == "" {
			continue
		}
		if err := os.WriteFile(o.path, o.body(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Part is one separately licensed part of the binaries: the project, the Go
// standard library, or a module.
type Part struct {
	Files     string   // DEP-5 Files pattern
	What      string   // "Go module github.com/x/y v1.2.3"; "" for the project
	In        []string // installed binaries that link it
	IDs       []string // SPDX identifiers found in its license file(s), sorted
	Text      string   // the license file(s)
	Copyright []string // copyright notices
	Notice    string   // NOTICE (and PATENTS) files, to be passed on
}

// Collect reads the build information of bins (installed path, built file)
// and describes the project (its license in projectLicense) and every module
// and the standard library linked into them. dirs maps "path@version" to
// the module's directory; goroot gives the standard library's for the
// given Go version.
func Collect(bins [][2]string, projectLicense string, dirs func([]string) (map[string]string, error), goroot func(goVersion string) (string, error)) ([]*Part, error) {
	type mod struct {
		path, version string
		in            []string
	}
	mods := map[string]*mod{}
	var goVersion, mainPath string
	for _, b := range bins {
		bi, err := buildinfo.ReadFile(b[1])
		if err != nil {
			return nil, fmt.Errorf("build information of %s: %w", b[1], err)
		}
		if goVersion != "" && bi.GoVersion != goVersion {
			return nil, fmt.Errorf("%s was built with %s, another binary with %s", b[1], bi.GoVersion, goVersion)
		}
		goVersion, mainPath = bi.GoVersion, bi.Main.Path
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			if d.Version == "" {
				return nil, fmt.Errorf("%s links %s from a local directory (replace): not a released module, refusing to package it", b[1], d.Path)
			}
			key := d.Path + "@" + d.Version
			m, ok := mods[key]
			if !ok {
				m = &mod{path: d.Path, version: d.Version}
				mods[key] = m
			}
			m.in = append(m.in, b[0])
		}
	}
	var all []string
	for _, b := range bins {
		all = append(all, b[0])
	}

	text, err := os.ReadFile(projectLicense)
	if err != nil {
		return nil, err
	}
	project, err := classify(mainPath, map[string][]byte{filepath.Base(projectLicense): text}, nil)
	if err != nil {
		return nil, err
	}
	project.Files = "*"
	project.In = all
	project.Copyright = nil // the holders come from the header
	parts := []*Part{project}

	root, err := goroot(goVersion)
	if err != nil {
		return nil, err
	}
	std, err := classifyDir("the Go standard library "+goVersion, "the Go authors", root)
	if err != nil {
		return nil, err
	}
	std.Files = "go/*"
	std.In = all
	parts = append(parts, std)

	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	located, err := dirs(keys)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		m := mods[k]
		dir, ok := located[k]
		if !ok {
			return nil, fmt.Errorf("module %s: no directory", k)
		}
		p, err := classifyDir("Go module "+m.path+" "+m.version, "the authors of "+m.path, dir)
		if err != nil {
			return nil, err
		}
		p.Files = m.path + "/*"
		p.In = m.in
		parts = append(parts, p)
	}
	return parts, nil
}

var (
	reLicenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)(-[a-z0-9.-]+)?(\.(txt|md|rst|markdown))?$`)
	reNoticeFile  = regexp.MustCompile(`(?i)^(notice|patents|copyright)(\.(txt|md))?$`)
	reCopyright   = regexp.MustCompile(`^(Copyright|COPYRIGHT|©)\s`)
	reYearOrMark  = regexp.MustCompile(`(?i)\b(19|20)\d\d\b|\(c\)|©`)
	reReserved    = regexp.MustCompile(`(?i)^(.*?\ball rights reserved\.?)`)
	rePlaceholder = regexp.MustCompile(`(?i)[\[{<](yyyy|year)[\]}>]`)
	reSourceNote  = regexp.MustCompile(`(?m)^//\s*(Copyright\b.*)$`)
)

// classifyDir reads the license and notice files at the top of dir; holders
// stands for the copyright holders when neither those files nor the Go
// sources' headers name any.
func classifyDir(what, holders, dir string) (*Part, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	licenses, notices := map[string][]byte{}, map[string][]byte{}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		var into map[string][]byte
		switch {
		case reLicenseFile.MatchString(e.Name()):
			into = licenses
		case reNoticeFile.MatchString(e.Name()):
			into = notices
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		into[e.Name()] = b
	}
	if len(licenses) == 0 {
		return nil, fmt.Errorf("%s: no license file (LICENSE, COPYING, ...) in %s", what, dir)
	}
	p, err := classify(what, licenses, notices)
	if err != nil {
		return nil, err
	}
	if len(p.Copyright) == 0 {
		p.Copyright = sourceNotices(dir)
	}
	if len(p.Copyright) == 0 {
		// DEP-5 needs the field; say honestly that nothing names a holder.
		p.Copyright = []string{holders}
	}
	return p, nil
}

// minCoverage is how much of a license file must be known license text:
// below it the file adds terms of its own, which a person has to read.
const minCoverage = 75

// classify identifies the licenses in the license files and gathers the
// copyright notices of license and notice files.
func classify(what string, licenses, notices map[string][]byte) (*Part, error) {
	p := &Part{What: what}
	var texts []string
	for _, name := range sortedKeys(licenses) {
		b := licenses[name]
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("%s: %s is not UTF-8", what, name)
		}
		cov := licensecheck.Scan(b)
		if cov.Percent < minCoverage || len(cov.Match) == 0 {
			return nil, fmt.Errorf("%s: %s: only %.0f%% of it is a known license (%v); identify it by hand", what, name, cov.Percent, ids(cov))
		}
		for _, id := range ids(cov) {
			if !slices.Contains(p.IDs, id) {
				p.IDs = append(p.IDs, id)
			}
		}
		texts = append(texts, strings.TrimSpace(string(b)))
		p.Copyright = append(p.Copyright, copyrightLines(b)...)
	}
	sort.Strings(p.IDs)
	p.Text = strings.Join(texts, "\n\n")
	var ns []string
	for _, name := range sortedKeys(notices) {
		b := notices[name]
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("%s: %s is not UTF-8", what, name)
		}
		p.Copyright = append(p.Copyright, copyrightLines(b)...)
		ns = append(ns, name+":\n"+strings.TrimSpace(string(b)))
	}
	p.Notice = strings.Join(ns, "\n\n")
	p.Copyright = unique(p.Copyright)
	return p, nil
}

func ids(cov licensecheck.Coverage) []string {
	var out []string
	for _, m := range cov.Match {
		if !m.IsURL && !slices.Contains(out, m.ID) {
			out = append(out, m.ID)
		}
	}
	return out
}

// copyrightLines are the lines of a license text that state a copyright
// ("Copyright (c) 2013 Name", "Copyright Name 2013, 2026"), up to "All
// rights reserved."; not the license's own sentences about copyright, nor
// its template lines ("Copyright [yyyy] [name of copyright owner]").
func copyrightLines(b []byte) []string {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if !reCopyright.MatchString(line) || !reYearOrMark.MatchString(line) || rePlaceholder.MatchString(line) {
			continue
		}
		if m := reReserved.FindStringSubmatch(line); m != nil {
			line = m[1]
		}
		out = append(out, line)
	}
	return out
}

// sourceNotices are the copyright lines of the module's Go files, for
// modules whose license file names no holder.
func sourceNotices(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && path != dir && (d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		// Only the header: the comment lines before the package clause.
		if i := bytes.Index(b, []byte("\npackage ")); i >= 0 {
			b = b[:i]
		}
		for _, m := range reSourceNote.FindAllSubmatch(b, -1) {
			out = append(out, copyrightLines(m[1])...)
		}
		return nil
	})
	return unique(out)
}

func unique(ss []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// DebianCommonLicenses are the SPDX identifiers whose texts Debian ships in
// /usr/share/common-licenses (base-files), with the file's name; a Debian
// copyright file refers to those instead of repeating them.
var DebianCommonLicenses = map[string]string{
	"Apache-2.0":   "Apache-2.0",
	"MPL-1.1":      "MPL-1.1",
	"MPL-2.0":      "MPL-2.0",
	"CC0-1.0":      "CC0-1.0",
	"GPL-2.0-only": "GPL-2",
	"GPL-3.0-only": "GPL-3",
	"LGPL-2.1":     "LGPL-2.1",
	"LGPL-3.0":     "LGPL-3",
}

// dep5Name is the DEP-5 short name of an SPDX identifier (DEP-5 calls MIT
// "Expat" and writes "clause" in lower case).
func dep5Name(id string) string {
	switch id {
	case "MIT":
		return "Expat"
	case "BSD-2-Clause", "BSD-3-Clause", "BSD-4-Clause":
		return strings.Replace(id, "Clause", "clause", 1)
	}
	return id
}

// License is the DEP-5 License value of p: its licenses, all of which apply.
func (p *Part) License() string {
	names := make([]string, len(p.IDs))
	for i, id := range p.IDs {
		names[i] = dep5Name(id)
	}
	return strings.Join(names, " and ")
}

// SPDX is the expression of everything linked into the binaries.
func SPDX(parts []*Part) string {
	var all []string
	for _, p := range parts {
		for _, id := range p.IDs {
			if !slices.Contains(all, id) {
				all = append(all, id)
			}
		}
	}
	sort.Strings(all)
	return strings.Join(all, " AND ")
}

// Render writes the DEP-5 file. Parts under a single license of common
// (identifier -> file name in /usr/share/common-licenses) name it, and one
// stand-alone paragraph per such license holds its text: with debian, a
// pointer to Debian's copy; else the text itself, taken from the first part
// licensed under it alone. Every other part carries its own license file's
// text, which also holds its holders' names as BSD-style licenses require.
func Render(h Header, parts []*Part, common map[string]string, debian bool) []byte {
	var b bytes.Buffer
	field(&b, "Format", "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")
	field(&b, "Upstream-Name", h.Name)
	field(&b, "Upstream-Contact", h.Contact)
	field(&b, "Source", h.Source)
	field(&b, "Comment", "Generated when the package was built, from the build information of\n"+
		"the binaries (go version -m): the Go standard library and every Go module\n"+
		"linked into them, with the license its license file holds, its copyright\n"+
		"notices and its NOTICE files. The Files patterns of the modules are their\n"+
		"module paths.")
	texts := map[string]string{} // stand-alone license -> text
	var standalone []string
	for _, p := range parts {
		b.WriteString("\n")
		field(&b, "Files", p.Files)
		holders := p.Copyright
		if p.Files == "*" {
			holders = []string{h.Copyright}
		}
		field(&b, "Copyright", strings.Join(holders, "\n"))
		if _, ok := common[single(p)]; ok {
			id := single(p)
			if _, seen := texts[id]; !seen {
				texts[id] = p.Text
				standalone = append(standalone, id)
			}
			field(&b, "License", p.License())
		} else {
			field(&b, "License", p.License()+"\n"+p.Text)
		}
		var comment []string
		if p.Files != "*" {
			comment = append(comment, p.What+", linked into "+strings.Join(p.In, " and ")+".")
		}
		if p.Notice != "" {
			comment = append(comment, "Its notice files, passed on as its license asks:\n\n"+p.Notice)
		}
		if len(comment) > 0 {
			field(&b, "Comment", strings.Join(comment, "\n\n"))
		}
	}
	sort.Strings(standalone)
	for _, id := range standalone {
		b.WriteString("\n")
		text := texts[id]
		if debian {
			text = "On Debian systems, the complete text of this license is in\n/usr/share/common-licenses/" + common[id] + "."
		}
		field(&b, "License", dep5Name(id)+"\n"+text)
	}
	return b.Bytes()
}

// single is p's license when it has exactly one, else "".
func single(p *Part) string {
	if len(p.IDs) == 1 {
		return p.IDs[0]
	}
	return ""
}

// field writes a deb822 field: the first line after the name, the others
// indented by one space, empty ones as " .", tabs expanded (tabs are not
// allowed in DEP-5 texts).
func field(w io.Writer, name, value string) {
	lines := strings.Split(strings.TrimRight(value, "\n \t"), "\n")
	fmt.Fprintf(w, "%s: %s\n", name, strings.TrimSpace(lines[0]))
	rest := lines[1:]
	for len(rest) > 0 && strings.TrimSpace(rest[0]) == "" {
		rest = rest[1:]
	}
	for _, l := range rest {
		l = strings.TrimRight(expandTabs(l), " \r")
		if l == "" {
			l = "."
		} else if strings.TrimSpace(l) == "." {
			l = ".."
		}
		fmt.Fprintf(w, " %s\n", l)
	}
}

func expandTabs(s string) string {
	if !strings.Contains(s, "\t") {
		return s
	}
	var b strings.Builder
	col := 0
	for _, r := range s {
		if r == '\t' {
			n := 8 - col%8
			b.WriteString(strings.Repeat(" ", n))
			col += n
			continue
		}
		b.WriteRune(r)
		col++
	}
	return b.String()
}

// goModDirs asks `go mod download` where each module@version is (the build
// has put them in the module cache; nothing is fetched then).
func goModDirs(mods []string) (map[string]string, error) {
	if len(mods) == 0 {
		return nil, nil
	}
	cmd := exec.Command("go", append([]string{"mod", "download", "-json"}, mods...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct{ Path, Version, Dir, Error string }
		if derr := dec.Decode(&m); derr == io.EOF {
			break
		} else if derr != nil {
			return nil, fmt.Errorf("go mod download: %w", derr)
		}
		if m.Error != "" {
			return nil, fmt.Errorf("go mod download %s@%s: %s", m.Path, m.Version, m.Error)
		}
		dirs[m.Path+"@"+m.Version] = m.Dir
	}
	if err != nil {
		return nil, fmt.Errorf("go mod download: %w: %s", err, stderr.String())
	}
	return dirs, nil
}

// goRoot is the standard library's directory of the go command, which must
// be the toolchain the binaries were built with.
func goRoot(goVersion string) (string, error) {
	out, err := exec.Command("go", "env", "GOROOT", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return "", fmt.Errorf("go env GOROOT GOVERSION: %q", out)
	}
	if f[1] != goVersion {
		return "", fmt.Errorf("the binaries were built with %s, the go command is %s", goVersion, f[1])
	}
	return f[0], nil
}
