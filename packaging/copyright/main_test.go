package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mitText = `MIT License

Copyright (c) 2019 Jane Doe <jane@example.org>

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
`

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A module's license is identified from its license file, its holders from
// the file's copyright lines (not the license's sentences about copyright),
// its NOTICE passed on; an unrecognisable or missing license stops the
// build.
func TestClassifyDir(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"LICENSE.md": mitText,
		"NOTICE":     "Copyright 2020 Acme Corp. All rights reserved. Some more words.\nThis product includes software from Acme.\n",
		"README.md":  "Copyright 1999 Not A License File\n",
	})
	p, err := classifyDir("Go module example.org/m v1.0.0", "the authors of example.org/m", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.IDs, []string{"MIT"}) || p.License() != "Expat" {
		t.Errorf("IDs %v, License %q", p.IDs, p.License())
	}
	want := []string{"Copyright (c) 2019 Jane Doe <jane@example.org>", "Copyright 2020 Acme Corp. All rights reserved."}
	if !slices.Equal(p.Copyright, want) {
		t.Errorf("copyright %q, want %q", p.Copyright, want)
	}
	if !strings.HasPrefix(p.Notice, "NOTICE:\nCopyright 2020 Acme") || !strings.Contains(p.Text, "Permission is hereby granted") {
		t.Errorf("notice %q / text %.40q", p.Notice, p.Text)
	}

	// No holder in the license file: the Go sources' headers name them.
	dir = writeFiles(t, map[string]string{
		"LICENSE":           strings.Replace(mitText, "Copyright (c) 2019 Jane Doe <jane@example.org>\n", "", 1),
		"a.go":              "// Copyright 2021 The Example Authors\n// Use of this source code is governed by the LICENSE file.\n\npackage m\n\n// Copyright 1900 not a header\n",
		"sub/b.go":          "// Copyright 2022 Someone Else\n\npackage sub\n",
		"sub/b_test.go":     "// Copyright 2023 Tests Only\n\npackage sub\n",
		"testdata/c.go":     "// Copyright 2024 Test Data\n\npackage c\n",
		"internal/dup/d.go": "// Copyright 2021 The Example Authors\n\npackage dup\n",
	})
	p, err = classifyDir("Go module example.org/m v1.0.0", "the authors of example.org/m", dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Copyright 2021 The Example Authors", "Copyright 2022 Someone Else"}; !slices.Equal(p.Copyright, want) {
		t.Errorf("from sources: %q, want %q", p.Copyright, want)
	}

	// Nobody named anywhere: the stand-in.
	dir = writeFiles(t, map[string]string{"COPYING": strings.Replace(mitText, "Copyright (c) 2019 Jane Doe <jane@example.org>\n", "", 1)})
	if p, err = classifyDir("m", "the authors of example.org/m", dir); err != nil || !slices.Equal(p.Copyright, []string{"the authors of example.org/m"}) {
		t.Errorf("stand-in: %q, %v", p.Copyright, err)
	}

	dir = writeFiles(t, map[string]string{"LICENSE": "You may do whatever you like, except on Tuesdays.\n"})
	if _, err := classifyDir("Go module example.org/odd v1.0.0", "x", dir); err == nil || !strings.Contains(err.Error(), "example.org/odd") || !strings.Contains(err.Error(), "identify it by hand") {
		t.Errorf("unknown license: %v", err)
	}
	dir = writeFiles(t, map[string]string{"README": "no license here\n"})
	if _, err := classifyDir("Go module example.org/none v1.0.0", "x", dir); err == nil || !strings.Contains(err.Error(), "no license file") {
		t.Errorf("no license: %v", err)
	}
}

// The generator run on this very test binary (its build information lists
// licensecheck, yaml-free) gives a well-formed DEP-5 file naming the
// project, the standard library and each module once, and a matching SPDX
// expression.
func TestOwnBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parts, err := Collect([][2]string{{"/usr/bin/copyright.test", exe}}, "../../LICENSE", goModDirs, goRoot)
	if err != nil {
		t.Fatal(err)
	}
	byFiles := map[string]*Part{}
	for _, p := range parts {
		if byFiles[p.Files] != nil {
			t.Errorf("%s listed twice", p.Files)
		}
		byFiles[p.Files] = p
	}
	for files, id := range map[string]string{"*": "Apache-2.0", "go/*": "BSD-3-Clause", "github.com/google/licensecheck/*": "BSD-3-Clause"} {
		p := byFiles[files]
		if p == nil || !slices.Equal(p.IDs, []string{id}) {
			t.Errorf("%s: %+v, want %s", files, p, id)
		}
	}
	if p := byFiles["github.com/google/licensecheck/*"]; p != nil && !slices.Contains(p.Copyright, "Copyright (c) 2019 The Go Authors. All rights reserved.") {
		t.Errorf("licensecheck holders: %q", p.Copyright)
	}
	if got := SPDX(parts); got != "Apache-2.0 AND BSD-3-Clause" {
		t.Errorf("SPDX %q", got)
	}
	for _, debian := range []bool{true, false} {
		out := string(Render(Header{Name: "fenced", Contact: "a <a@example.org>", Source: "https://example.org/fenced", Copyright: "fenced developers"}, parts, DebianCommonLicenses, debian))
		checkDEP5(t, out)
		if strings.Contains(out, "/usr/share/common-licenses/Apache-2.0") != debian {
			t.Errorf("debian=%v: reference to Debian's Apache-2.0 text: %v", debian, !debian)
		}
		if strings.Contains(out, "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION") == debian {
			t.Errorf("debian=%v: Apache-2.0 text included: %v", debian, debian)
		}
	}
}

// checkDEP5 checks the rules of the copyright format 1.0 that a generator
// can break: deb822 syntax (continuation lines, no tabs, " ." for empty
// lines), the header's Format, the fields each Files paragraph needs, and a
// text for every license named (in place or in a stand-alone paragraph).
func checkDEP5(t *testing.T, doc string) {
	t.Helper()
	var paras []map[string]string
	for _, block := range strings.Split(strings.TrimRight(doc, "\n"), "\n\n") {
		fields := map[string]string{}
		var last string
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.Contains(line, "\t"):
				t.Errorf("tab in %q", line)
			case strings.TrimSpace(line) == "":
				t.Errorf("empty line inside a paragraph: %q", block)
			case line[0] == ' ':
				if last == "" {
					t.Errorf("continuation before any field: %q", line)
				}
				fields[last] += "\n" + line[1:]
			default:
				name, value, ok := strings.Cut(line, ":")
				if !ok || strings.ContainsAny(name, " ") {
					t.Errorf("not a field: %q", line)
					continue
				}
				if _, dup := fields[name]; dup {
					t.Errorf("field %s twice in a paragraph", name)
				}
				fields[name] = strings.TrimSpace(value)
				last = name
			}
		}
		paras = append(paras, fields)
	}
	if !strings.HasPrefix(paras[0]["Format"], "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/") {
		t.Errorf("header Format: %q", paras[0]["Format"])
	}
	standalone := map[string]bool{}
	for _, p := range paras[1:] {
		if _, files := p["Files"]; !files {
			short, text, _ := strings.Cut(p["License"], "\n")
			if short == "" || strings.TrimSpace(text) == "" {
				t.Errorf("stand-alone License paragraph without a name or text: %q", p["License"])
			}
			if standalone[short] {
				t.Errorf("license %s defined twice", short)
			}
			standalone[short] = true
		}
	}
	for _, p := range paras[1:] {
		if _, files := p["Files"]; !files {
			continue
		}
		for _, f := range []string{"Copyright", "License"} {
			if strings.TrimSpace(p[f]) == "" {
				t.Errorf("Files: %s: no %s", p["Files"], f)
			}
		}
		short, text, _ := strings.Cut(p["License"], "\n")
		if strings.TrimSpace(text) != "" {
			continue
		}
		for _, name := range strings.Split(short, " and ") {
			if !standalone[name] {
				t.Errorf("Files: %s: license %s has no text", p["Files"], name)
			}
		}
	}
}

func TestField(t *testing.T) {
	var b strings.Builder
	field(&b, "License", "Expat\n\nfirst\n\n\tindented\n.\nlast  \n\n")
	want := "License: Expat\n first\n .\n         indented\n ..\n last\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestRunUsage(t *testing.T) {
	if err := run([]string{"--contact", "c", "--source", "s", "--copyright", "h"}); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("no binaries: %v", err)
	}
	if err := run([]string{"--contact", "c", "--source", "s", "--copyright", "h", "/usr/bin/x"}); err == nil || !strings.Contains(err.Error(), "INSTALLED-PATH=BUILT-BINARY") {
		t.Errorf("bad pair: %v", err)
	}
	if err := run([]string{"--contact", "c", "--source", "s", "--copyright", "h", "/usr/bin/x=" + filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "build information") {
		t.Errorf("missing binary: %v", err)
	}
}
