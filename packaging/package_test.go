package packaging

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the test stamps into the build, and what pkgversion.sh makes of it.
const (
	testDescribe   = "v9.8.7-3-g0123abc"
	testPkgVersion = "9.8.7+git3.0123abc-1"
	testEpoch      = "1700000000"
	// testOldDescribe is the release an upgrade starts from.
	testOldDescribe = "v9.8.6"
)

// shipped lists every path the packages must hold with its mode and type
// (ls style), owned by root. Man pages are checked against the generated set
// in TestPackages/docs; zsh completions sit where each distribution's zsh
// looks.
func shipped(packager string) map[string]string {
	zsh := "/usr/share/zsh/vendor-completions/"
	if packager == "rpm" {
		zsh = "/usr/share/zsh/site-functions/"
	}
	m := map[string]string{
		"/usr/sbin/fenced":                                   "-rwxr-xr-x",
		"/usr/bin/fencectl":                                  "-rwxr-xr-x",
		"/etc/fenced":                                        "drwxr-xr-x",
		"/etc/fenced/fenced.yaml":                            "-rw-r-----",
		"/usr/lib/systemd/system/fenced.service":             "-rw-r--r--",
		"/usr/lib/tmpfiles.d/fenced.conf":                    "-rw-r--r--",
		"/var/lib/fenced":                                    "drwx------",
		"/usr/lib/fenced":                                    "drwxr-xr-x",
		"/usr/lib/fenced/agents":                             "drwxr-xr-x",
		"/usr/share/man/man8/fenced.8.gz":                    "-rw-r--r--",
		"/usr/share/man/man8/fenced-run.8.gz":                "-rw-r--r--",
		"/usr/share/man/man5/fenced.yaml.5.gz":               "-rw-r--r--",
		"/usr/share/man/man1/fencectl.1.gz":                  "-rw-r--r--",
		"/usr/share/doc/fenced/README.md":                    "-rw-r--r--",
		"/usr/share/bash-completion/completions/fenced":      "-rw-r--r--",
		"/usr/share/bash-completion/completions/fencectl":    "-rw-r--r--",
		zsh + "_fenced":                                      "-rw-r--r--",
		zsh + "_fencectl":                                    "-rw-r--r--",
		"/usr/share/fish/vendor_completions.d/fenced.fish":   "-rw-r--r--",
		"/usr/share/fish/vendor_completions.d/fencectl.fish": "-rw-r--r--",
		"/usr/share/fenced":                                  "drwxr-xr-x",
		"/usr/share/fenced/prometheus":                       "drwxr-xr-x",
		"/usr/share/fenced/prometheus/fenced-rules.yml":      "-rw-r--r--",
		"/usr/share/fenced/grafana":                          "drwxr-xr-x",
		"/usr/share/fenced/grafana/fenced-dashboard.json":    "-rw-r--r--",
	}
	if packager == "rpm" {
		// Fedora's rule: the package owns its runtime directory, as %ghost
		// (Debian's: nothing under /run; tmpfiles.d makes it).
		m["/run/fenced"] = "drwxr-xr-x"
		m["/usr/share/licenses/fenced/LICENSE"] = "-rw-r--r--"
		m["/usr/share/licenses/fenced/copyright"] = "-rw-r--r--"
	} else {
		m["/usr/share/doc/fenced/copyright"] = "-rw-r--r--"
		m["/usr/share/doc/fenced/changelog.Debian.gz"] = "-rw-r--r--"
		m["/usr/share/lintian/overrides/fenced"] = "-rw-r--r--"
	}
	return m
}

// pkgFile is one entry of a package's file list.
type pkgFile struct {
	mode   string // ls style: -rw-r--r--, drwx------
	owner  string // user/group
	digest string // sha256 hex of a regular file (rpm only)
}

// TestPackages builds both packages through `make package`, checks their file
// lists and modes (acceptance 1), that the man pages and completions inside
// are those the current commands generate (6), that the copyright files and
// the rpm's License are those the shipped binaries' modules give, that
// lintian and rpmlint find nothing the packaging does not justify, then
// installs, runs, removes and reinstalls the .deb on this machine, verifying
// the unit with systemd-analyze (2, 3), and purges it again.
func TestPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both packages (minutes on a cold cache); not in -short")
	}
	for _, tool := range []string{"make", "go", "dpkg-deb", "dpkg-parsechangelog", "rpm", "systemd-analyze", "lintian", "rpmlint"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (.ci/install-deps installs it): %v", tool, err)
		}
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	start := time.Now()
	cmd := exec.Command("make", "-C", repo, "package", "VERSION="+testDescribe, "DIST="+dist)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+testEpoch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make package: %v\n%s", err, out)
	}
	t.Logf("make package: %v", time.Since(start).Round(time.Second))
	deb := onlyMatch(t, filepath.Join(dist, "fenced_*.deb"))
	rpm := onlyMatch(t, filepath.Join(dist, "fenced-*.rpm"))

	var debFiles, rpmFiles map[string]pkgFile
	t.Run("deb", func(t *testing.T) {
		debFiles = debList(t, deb)
		checkShipped(t, "deb", debFiles)
		if v := run(t, "dpkg-deb", "-f", deb, "Version"); strings.TrimSpace(v) != testPkgVersion {
			t.Errorf("deb version %q, want %q", strings.TrimSpace(v), testPkgVersion)
		}
		if c := run(t, "dpkg-deb", "-I", deb, "conffiles"); strings.TrimSpace(c) != "/etc/fenced/fenced.yaml" {
			t.Errorf("conffiles %q, want only /etc/fenced/fenced.yaml", c)
		}
		if pre := run(t, "dpkg-deb", "-I", deb, "preinst"); !strings.Contains(pre, "groupadd --system fenced") {
			t.Errorf("preinst does not create the fenced group:\n%s", pre)
		}
		// Removal stops the daemon through deb-systemd-invoke (policy-rc.d).
		if pre := run(t, "dpkg-deb", "-I", deb, "prerm"); !strings.Contains(pre, "deb-systemd-invoke stop fenced.service") || strings.Contains(pre, "systemctl") {
			t.Errorf("prerm:\n%s", pre)
		}
		// Nothing under /run in a .deb (a tmpfs; tmpfiles.d makes it).
		for p := range debFiles {
			if strings.HasPrefix(p, "/run") {
				t.Errorf("the .deb ships %s", p)
			}
		}
	})
	t.Run("rpm", func(t *testing.T) {
		rpmFiles = rpmList(t, rpm)
		checkShipped(t, "rpm", rpmFiles)
		if v := run(t, "rpm", "-qp", "--qf", "%{VERSION}-%{RELEASE}", rpm); v != testPkgVersion {
			t.Errorf("rpm version %q, want %q", v, testPkgVersion)
		}
		flags := run(t, "rpm", "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]", rpm)
		if !slices.Contains(strings.Split(flags, "\n"), "/etc/fenced/fenced.yaml cn") {
			t.Errorf("/etc/fenced/fenced.yaml is not %%config(noreplace):\n%s", flags)
		}
		if s := run(t, "rpm", "-qp", "--scripts", rpm); !strings.Contains(s, "groupadd --system fenced") || !strings.Contains(s, "systemctl --no-reload disable --now fenced.service") {
			t.Errorf("rpm scripts do not create the fenced group or do not stop the service on erase:\n%s", s)
		}
		// %doc, %license and %ghost: rpm --excludedocs leaves the docs out,
		// /run/fenced is owned but not in the payload.
		for _, line := range strings.Split(strings.TrimSpace(flags), "\n") {
			path, fl, _ := strings.Cut(line, " ")
			var want string
			switch {
			case strings.HasPrefix(path, "/usr/share/man/"), path == "/usr/share/doc/fenced/README.md":
				want = "d"
			case strings.HasPrefix(path, "/usr/share/licenses/fenced/"):
				want = "l"
			case path == "/run/fenced":
				want = "g"
			default:
				continue
			}
			if fl != want {
				t.Errorf("rpm: %s has flags %q, want %q", path, fl, want)
			}
		}
		meta := run(t, "rpm", "-qp", "--qf", "%{URL}|%{VENDOR}|%{GROUP}", rpm)
		if meta != nfpmField(t, "homepage")+"|"+nfpmField(t, "vendor")+"|System Environment/Daemons" {
			t.Errorf("rpm URL|Vendor|Group: %q", meta)
		}
		if cl := run(t, "rpm", "-qp", "--changelog", rpm); !strings.Contains(cl, nfpmField(t, "maintainer")+" - "+testPkgVersion+"\n- Package of fenced "+testDescribe+".") {
			t.Errorf("rpm changelog:\n%s", cl)
		}
	})
	if t.Failed() {
		return
	}
	t.Run("changelog", func(t *testing.T) { checkChangelog(t, deb) })
	t.Run("copyright", func(t *testing.T) { checkCopyright(t, repo, deb, rpm, rpmFiles) })
	t.Run("lintian", func(t *testing.T) { checkLintian(t, deb) })
	t.Run("rpmlint", func(t *testing.T) { checkRpmlint(t, repo, rpm, rpmFiles) })
	t.Run("docs", func(t *testing.T) { checkDocs(t, repo, deb, debFiles, rpmFiles) })
	t.Run("install", func(t *testing.T) { checkInstall(t, repo, deb) })
	t.Run("upgrade", func(t *testing.T) {
		old := t.TempDir()
		cmd := exec.Command("make", "-C", repo, "package", "VERSION="+testOldDescribe, "DIST="+old)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+testEpoch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make package (older version): %v\n%s", err, out)
		}
		checkUpgrade(t, onlyMatch(t, filepath.Join(old, "fenced_*.deb")), deb)
	})
}

func onlyMatch(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(pattern)
	if len(m) != 1 {
		t.Fatalf("%s: %d files, want 1: %v", pattern, len(m), m)
	}
	return m[0]
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

func checkShipped(t *testing.T, packager string, files map[string]pkgFile) {
	t.Helper()
	for p, mode := range shipped(packager) {
		f, ok := files[p]
		switch {
		case !ok:
			t.Errorf("%s: no %s", packager, p)
		case f.mode != mode:
			t.Errorf("%s: %s has mode %s, want %s", packager, p, f.mode, mode)
		}
	}
	for p, f := range files {
		// nfpm writes the changelog it generates with numeric ids only.
		if f.owner != "root/root" && f.owner != "0/0" {
			t.Errorf("%s: %s owned by %s, want root/root", packager, p, f.owner)
		}
		if strings.HasPrefix(p, "/usr/share/man/") && f.mode[0] == '-' && f.mode != "-rw-r--r--" {
			t.Errorf("%s: %s has mode %s", packager, p, f.mode)
		}
	}
}

// debList parses `dpkg-deb -c`: "drwxr-xr-x root/root 0 2023-11-14 22:13 ./etc/".
func debList(t *testing.T, deb string) map[string]pkgFile {
	t.Helper()
	files := map[string]pkgFile{}
	sc := bufio.NewScanner(strings.NewReader(run(t, "dpkg-deb", "-c", deb)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c: unexpected line %q", sc.Text())
		}
		p := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		if p == "" {
			continue
		}
		files[p] = pkgFile{mode: f[0], owner: f[1]}
	}
	return files
}

// rpmList parses `rpm -qp --dump`: "path size mtime digest mode owner group
// isconfig isdoc rdev symlink", mode in octal with the file type bits.
func rpmList(t *testing.T, rpm string) map[string]pkgFile {
	t.Helper()
	files := map[string]pkgFile{}
	sc := bufio.NewScanner(strings.NewReader(run(t, "rpm", "-qp", "--dump", rpm)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			t.Fatalf("rpm --dump: unexpected line %q", sc.Text())
		}
		raw, err := strconv.ParseUint(f[4], 8, 32)
		if err != nil {
			t.Fatalf("rpm --dump: mode %q of %s: %v", f[4], f[0], err)
		}
		mode := os.FileMode(raw & 0o777)
		switch raw & syscall.S_IFMT {
		case syscall.S_IFDIR:
			mode |= os.ModeDir
		case syscall.S_IFREG:
		default:
			t.Errorf("rpm: %s is neither a file nor a directory (mode %s)", f[0], f[4])
		}
		files[f[0]] = pkgFile{mode: mode.String(), owner: f[5] + "/" + f[6], digest: f[3]}
	}
	return files
}

// checkDocs regenerates the man pages and completions from the current
// sources, with a build of its own, and compares them byte for byte with the
// .deb's (extracted) and the .rpm's (by digest). A page for a command that no
// longer exists, or a stale completion, fails as well.
func checkDocs(t *testing.T, repo, deb string, debFiles, rpmFiles map[string]pkgFile) {
	tmp := t.TempDir()
	ref := filepath.Join(tmp, "ref")
	for _, name := range []string{"fenced", "fencectl"} {
		bin := filepath.Join(tmp, name)
		build := exec.Command("go", "build", "-ldflags", "-X github.com/fenced/fenced/daemon/api.Version="+testDescribe, "-o", bin, "./cmd/"+name)
		build.Dir = repo
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, out)
		}
		gen := exec.Command(bin, "gen-docs", "--man", filepath.Join(ref, "man"), "--completions", filepath.Join(ref, "completions"))
		gen.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+testEpoch)
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("%s gen-docs: %v\n%s", name, err, out)
		}
	}
	// fenced.yaml(5), from the current daemon/config.
	gen := exec.Command("go", "run", "./cmd/internal/docgen/fencedyaml", "--version", testDescribe, "--out", filepath.Join(ref, "man"))
	gen.Dir = repo
	gen.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+testEpoch)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("fencedyaml: %v\n%s", err, out)
	}
	root := filepath.Join(tmp, "deb")
	run(t, "dpkg-deb", "-x", deb, root)

	// package path (deb) -> regenerated file; the rpm has the same content,
	// zsh completions under site-functions. Each page in its section:
	// fenced's commands in 8, fencectl's in 1, the configuration file in 5.
	want := map[string]string{}
	pages, _ := filepath.Glob(filepath.Join(ref, "man", "*.[0-9]"))
	sections := map[string]int{}
	for _, p := range pages {
		sec := p[len(p)-1:]
		name := strings.TrimSuffix(filepath.Base(p), "."+sec)
		sections[strings.SplitN(name, "-", 2)[0]+"("+sec+")"]++
		want["/usr/share/man/man"+sec+"/"+filepath.Base(p)+".gz"] = p
	}
	if sections["fenced(8)"] < 4 || sections["fencectl(1)"] < 5 || sections["fenced.yaml(5)"] != 1 || len(sections) != 3 {
		t.Fatalf("regenerated pages by command and section: %v", sections)
	}
	for _, name := range []string{"fenced", "fencectl"} {
		c := filepath.Join(ref, "completions", name)
		want["/usr/share/bash-completion/completions/"+name] = c + ".bash"
		want["/usr/share/zsh/vendor-completions/_"+name] = c + ".zsh"
		want["/usr/share/fish/vendor_completions.d/"+name+".fish"] = c + ".fish"
	}
	for p := range debFiles {
		if isDoc(p) && debFiles[p].mode[0] == '-' && want[p] == "" {
			t.Errorf("the .deb ships %s, which the current commands do not generate", p)
		}
	}
	for p := range rpmFiles {
		if isDoc(p) && rpmFiles[p].mode[0] == '-' && want[rpmToDeb(p)] == "" {
			t.Errorf("the .rpm ships %s, which the current commands do not generate", p)
		}
	}
	for p, regenerated := range want {
		wantBytes, err := os.ReadFile(regenerated)
		if err != nil {
			t.Fatal(err)
		}
		shipped, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Errorf("deb: %v", err)
			continue
		}
		if strings.HasSuffix(p, ".gz") {
			if shipped, err = gunzip(shipped); err != nil {
				t.Errorf("deb: %s: %v", p, err)
				continue
			}
		}
		if !bytes.Equal(shipped, wantBytes) {
			t.Errorf("deb: %s differs from what the current commands generate (%s)", p, filepath.Base(regenerated))
		}
		// The rpm's file, by digest, must be the very file the deb ships.
		sum, _ := os.ReadFile(filepath.Join(root, p))
		h := sha256.Sum256(sum)
		if got := rpmFiles[debToRPM(p)].digest; got != hex.EncodeToString(h[:]) {
			t.Errorf("rpm: %s has digest %q, the .deb's file %x", debToRPM(p), got, h)
		}
	}
}

func isDoc(p string) bool {
	return strings.HasPrefix(p, "/usr/share/man/") || strings.Contains(p, "completion") || strings.HasPrefix(p, "/usr/share/zsh/")
}

func debToRPM(p string) string {
	return strings.Replace(p, "/usr/share/zsh/vendor-completions/", "/usr/share/zsh/site-functions/", 1)
}

func rpmToDeb(p string) string {
	return strings.Replace(p, "/usr/share/zsh/site-functions/", "/usr/share/zsh/vendor-completions/", 1)
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// checkInstall installs the .deb, runs what it installed, verifies the unit,
// removes it (the edited conffile stays), reinstalls, and purges. It never
// starts the service, and leaves the machine as it found it.
// prepareInstall makes sure the machine has no fenced package or state of
// its own (the test will not touch them) and leaves it as it found it: the package
// purged, raft state a test left removed, the group deleted if the test
// created it. It reports whether the group existed before.
func prepareInstall(t *testing.T) (groupExisted bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("installing the .deb needs root (CI runs as root)")
	}
	if st, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", "fenced").Output(); err == nil && len(st) > 0 && !strings.Contains(string(st), "not-installed") {
		t.Fatalf("a fenced package is already on this machine (%s); not touching it — purge it to run this test", st)
	}
	if _, err := os.Stat("/var/lib/fenced"); err == nil {
		t.Fatal("/var/lib/fenced exists on this machine (a node's raft state?); not touching it — move it away to run this test")
	}
	groupExisted = exec.Command("getent", "group", "fenced").Run() == nil
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "-P", "fenced").CombinedOutput(); err != nil {
			t.Errorf("cleanup: dpkg -P fenced: %v\n%s", err, out)
		}
		os.RemoveAll("/var/lib/fenced")
		if !groupExisted && exec.Command("getent", "group", "fenced").Run() == nil {
			if out, err := exec.Command("groupdel", "fenced").CombinedOutput(); err != nil {
				t.Errorf("cleanup: groupdel fenced: %v\n%s", err, out)
			}
		}
	})
	return groupExisted
}

// dpkg runs dpkg non-interactively; a failure ends the test.
func dpkg(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("dpkg", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func checkInstall(t *testing.T, repo, deb string) {
	groupExisted := prepareInstall(t)
	dpkg(t, "-i", deb)

	checkInstalledBinaries(t)
	group := strings.Split(strings.TrimSpace(run(t, "getent", "group", "fenced")), ":")
	if gid, err := strconv.Atoi(group[len(group)-2]); err != nil || (!groupExisted && gid >= 1000) {
		t.Errorf("group fenced %q: not a system group", group)
	}
	checkDir(t, "/var/lib/fenced", 0o700)
	checkDir(t, "/run/fenced", 0o755)
	checkDir(t, "/usr/lib/fenced/agents", 0o755)
	conf := "/etc/fenced/fenced.yaml"
	sample, err := os.ReadFile(filepath.Join(repo, "etc", "fenced.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(conf); err != nil || !bytes.Equal(b, sample) {
		t.Errorf("%s is not etc/fenced.yaml (err %v)", conf, err)
	}
	if fi, err := os.Stat(conf); err != nil || fi.Mode() != 0o640 {
		t.Errorf("%s: mode %v, %v", conf, fi.Mode(), err)
	}
	checkValidate(t)
	checkVerify(t)
	checkNotStarted(t)

	// Remove: binaries and unit gone, the edited configuration kept.
	edit := append(slices.Clone(sample), []byte("# edited by the package test\n")...)
	if err := os.WriteFile(conf, edit, 0o640); err != nil {
		t.Fatal(err)
	}
	dpkg(t, "-r", "fenced")
	for _, p := range []string{"/usr/sbin/fenced", "/usr/bin/fencectl", "/usr/lib/systemd/system/fenced.service"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after dpkg -r: %s still there (%v)", p, err)
		}
	}
	if b, err := os.ReadFile(conf); err != nil || !bytes.Equal(b, edit) {
		t.Errorf("after dpkg -r: %s not kept as edited (err %v)", conf, err)
	}
	if st := run(t, "dpkg-query", "-W", "-f", "${Status}", "fenced"); st != "deinstall ok config-files" {
		t.Errorf("after dpkg -r: status %q", st)
	}

	// Reinstall: works, and keeps the edited configuration.
	dpkg(t, "-i", deb)
	checkInstalledBinaries(t)
	if b, err := os.ReadFile(conf); err != nil || !bytes.Equal(b, edit) {
		t.Errorf("after reinstall: %s not kept as edited (err %v)", conf, err)
	}

	// Purge: nothing of the package is left, the group it created
	// neither; one that was there before stays.
	dpkg(t, "-P", "fenced")
	for _, p := range []string{conf, "/etc/fenced", "/var/lib/fenced", "/run/fenced", "/usr/lib/fenced", "/usr/sbin/fenced"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after dpkg -P: %s still there (%v)", p, err)
		}
	}
	if has := exec.Command("getent", "group", "fenced").Run() == nil; has != groupExisted {
		t.Errorf("after dpkg -P: group fenced there: %v, before the install: %v", has, groupExisted)
	}
	// A group with a member is in use beyond the package: a purge keeps it.
	if !groupExisted {
		dpkg(t, "-i", deb)
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--groups", "fenced", "fenced-pkgtest").CombinedOutput(); err != nil {
			t.Fatalf("useradd: %v\n%s", err, out)
		}
		defer exec.Command("userdel", "fenced-pkgtest").Run()
		dpkg(t, "-P", "fenced")
		if exec.Command("getent", "group", "fenced").Run() != nil {
			t.Error("after dpkg -P: the fenced group with a member was removed")
		}
		exec.Command("userdel", "fenced-pkgtest").Run()
	}
}

// checkUpgrade installs the older package, edits the configuration and
// leaves raft state behind, then upgrades: the new binaries run, the edit
// and the state are kept. A purge then removes the package but keeps the
// raft state (a node must not forget its vote), as postremove promises.
func checkUpgrade(t *testing.T, oldDeb, newDeb string) {
	prepareInstall(t)
	dpkg(t, "-i", oldDeb)
	if out := run(t, "/usr/sbin/fenced", "version"); !strings.HasPrefix(out, "fenced "+testOldDescribe+" ") {
		t.Fatalf("older package: fenced version %q", out)
	}
	conf := "/etc/fenced/fenced.yaml"
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	edit := append(b, []byte("# edited before the upgrade\n")...)
	if err := os.WriteFile(conf, edit, 0o640); err != nil {
		t.Fatal(err)
	}
	state := "/var/lib/fenced/raft.db"
	if err := os.WriteFile(state, []byte("votes and epochs"), 0o600); err != nil {
		t.Fatal(err)
	}

	dpkg(t, "-i", newDeb)
	checkInstalledBinaries(t)
	if v := run(t, "dpkg-query", "-W", "-f", "${Version} ${Status}", "fenced"); v != testPkgVersion+" install ok installed" {
		t.Errorf("after the upgrade: %q", v)
	}
	if b, err := os.ReadFile(conf); err != nil || !bytes.Equal(b, edit) {
		t.Errorf("after the upgrade: %s not kept as edited (err %v)", conf, err)
	}
	if b, err := os.ReadFile(state); err != nil || string(b) != "votes and epochs" {
		t.Errorf("after the upgrade: %s lost (%q, %v)", state, b, err)
	}
	checkDir(t, "/var/lib/fenced", 0o700)

	dpkg(t, "-P", "fenced")
	if _, err := os.Stat("/usr/sbin/fenced"); !os.IsNotExist(err) {
		t.Errorf("after dpkg -P: /usr/sbin/fenced still there (%v)", err)
	}
	if _, err := os.Stat(conf); !os.IsNotExist(err) {
		t.Errorf("after dpkg -P: %s still there (%v)", conf, err)
	}
	if b, err := os.ReadFile(state); err != nil || string(b) != "votes and epochs" {
		t.Errorf("after dpkg -P: the raft state was removed (%q, %v); a node must not forget its vote", b, err)
	}
}

func checkInstalledBinaries(t *testing.T) {
	t.Helper()
	if out := run(t, "/usr/sbin/fenced", "version"); !strings.HasPrefix(out, "fenced "+testDescribe+" ") {
		t.Errorf("fenced version: %q, want the stamped %s", out, testDescribe)
	}
	if out := run(t, "/usr/bin/fencectl", "--help"); !strings.Contains(out, "fencectl talks to the local fenced daemon") {
		t.Errorf("fencectl --help: %q", out)
	}
	// No daemon: fencectl reaches for the packaged socket path and says so
	// with its "not running" exit code.
	err := exec.Command("/usr/bin/fencectl", "status").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("fencectl status without a daemon: %v, want exit 3", err)
	}
}

func checkDir(t *testing.T, path string, perm os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm() != perm || st.Uid != 0 {
		t.Errorf("%s: %v uid %d, want a root-owned directory %v", path, fi.Mode(), st.Uid, perm)
	}
}

// checkValidate runs the installed fenced on the installed sample
// configuration: it parses and validates, and only the secrets and
// certificates an administrator must create are reported missing.
func checkValidate(t *testing.T) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("/usr/sbin/fenced", "validate", "--config", "/etc/fenced/fenced.yaml")
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("fenced validate: %v\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.Contains(line, "no such file or directory") {
			t.Errorf("fenced validate of the shipped configuration: %s", line)
		}
	}
}

// checkVerify runs systemd-analyze verify on the installed unit (its binary
// and, when man is there, its Documentation= pages exist now): it must exit
// 0 and say nothing about fenced.service — unknown keys are only warnings.
func checkVerify(t *testing.T) {
	t.Helper()
	args := []string{"verify"}
	if _, err := exec.LookPath("man"); err != nil {
		args = append(args, "--man=no")
	}
	args = append(args, "/usr/lib/systemd/system/fenced.service")
	out, err := exec.Command("systemd-analyze", args...).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "fenced") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}

// checkNotStarted: installing must not start the daemon.
func checkNotStarted(t *testing.T) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if exe, err := os.Readlink(p); err == nil && exe == "/usr/sbin/fenced" {
			t.Errorf("installing started %s (%s)", exe, p)
		}
	}
}

// pkgversion.sh turns git describe output into versions both dpkg and rpm
// accept and order the way releases go.
func TestPkgVersion(t *testing.T) {
	for _, tool := range []string{"dpkg", "rpm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (.ci/install-deps installs it): %v", tool, err)
		}
	}
	cases := []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-rc1", "1.2.3~rc1"},
		{"v1.2.3-4-gabc1234", "1.2.3+git4.abc1234"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+git4.abc1234.dirty"},
		{"0.1.0-dev", "0.1.0~dev"},
		{"feature/x y", "0.0.0~feature.x.y"},
	}
	for _, c := range cases {
		if got := pkgVersion(t, c.describe, ""); got != c.want {
			t.Errorf("pkgversion %q = %q, want %q", c.describe, got, c.want)
		}
	}
	// An untagged commit unknown to git gets SOURCE_DATE_EPOCH's time.
	if got := pkgVersion(t, "deadbee", "1700000000"); got != "0.1.0~git20231114221320.deadbee" {
		t.Errorf("untagged: %q", got)
	}
	// Ascending: pre-release < release < later commits < next release;
	// untagged commits in commit-time order, all before 0.1.0.
	order := []string{
		pkgVersion(t, "0.1.0-dev", ""),
		pkgVersion(t, "abc1234", "1700000000"),
		pkgVersion(t, "0123abc", "1700000060"),
		pkgVersion(t, "v0.1.0", ""),
		pkgVersion(t, "v1.2.3-rc1", ""),
		pkgVersion(t, "v1.2.3", ""),
		pkgVersion(t, "v1.2.3-4-gabc1234", ""),
		pkgVersion(t, "v1.2.3-12-g0000000", ""),
		pkgVersion(t, "v1.2.4", ""),
	}
	for i := 1; i < len(order); i++ {
		lo, hi := order[i-1]+"-1", order[i]+"-1"
		if err := exec.Command("dpkg", "--compare-versions", lo, "lt", hi).Run(); err != nil {
			t.Errorf("dpkg: %s is not before %s", lo, hi)
		}
		cmp := run(t, "rpm", "--eval", fmt.Sprintf("%%{lua: print(rpm.vercmp(%q, %q))}", order[i-1], order[i]))
		if strings.TrimSpace(cmp) != "-1" {
			t.Errorf("rpm: %s is not before %s (vercmp %s)", order[i-1], order[i], strings.TrimSpace(cmp))
		}
	}
}

func pkgVersion(t *testing.T, describe, epoch string) string {
	t.Helper()
	cmd := exec.Command("./pkgversion.sh", describe)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+epoch)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pkgversion.sh %q: %v", describe, err)
	}
	return strings.TrimSpace(string(out))
}

// nfpmField is a top-level scalar of nfpm.yaml (maintainer, homepage, ...).
func nfpmField(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			return v
		}
	}
	t.Fatalf("nfpm.yaml has no %s", key)
	return ""
}

// checkChangelog: the .deb's changelog.Debian.gz is a Debian changelog
// (dpkg parses it) whose entry is this very version.
func checkChangelog(t *testing.T, deb string) {
	tmp := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, tmp)
	gz, err := os.ReadFile(filepath.Join(tmp, "usr/share/doc/fenced/changelog.Debian.gz"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := gunzip(gz)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(tmp, "changelog")
	if err := os.WriteFile(f, text, 0o644); err != nil {
		t.Fatal(err)
	}
	got := run(t, "dpkg-parsechangelog", "-l", f, "-S", "Version")
	if strings.TrimSpace(got) != testPkgVersion {
		t.Errorf("changelog version %q, want %s:\n%s", got, testPkgVersion, text)
	}
	if m := run(t, "dpkg-parsechangelog", "-l", f, "-S", "Maintainer"); strings.TrimSpace(m) != nfpmField(t, "maintainer") {
		t.Errorf("changelog maintainer %q", m)
	}
}

// checkCopyright regenerates the copyright files and the rpm's License from
// the binaries the .deb ships, the way build.sh does, and compares them with
// what the packages carry: the .deb's copyright, the rpm's full-text one (by
// digest), the rpm's License tag. Independently of the generator, every
// module in the binaries' build information must have its Files paragraph.
func checkCopyright(t *testing.T, repo, deb, rpm string, rpmFiles map[string]pkgFile) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "deb")
	run(t, "dpkg-deb", "-x", deb, root)
	out := filepath.Join(tmp, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	gen := exec.Command("go", "run", "./packaging/copyright", "--name", "fenced",
		"--contact", nfpmField(t, "maintainer"), "--source", nfpmField(t, "homepage"), "--copyright", nfpmField(t, "vendor"),
		"--license", "LICENSE", "--deb", filepath.Join(out, "deb"), "--full", filepath.Join(out, "full"), "--spdx", filepath.Join(out, "spdx"),
		"/usr/sbin/fenced="+filepath.Join(root, "usr/sbin/fenced"), "/usr/bin/fencectl="+filepath.Join(root, "usr/bin/fencectl"))
	gen.Dir = repo
	if b, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("copyright generator: %v\n%s", err, b)
	}
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	shipped := read(filepath.Join(root, "usr/share/doc/fenced/copyright"))
	if !bytes.Equal(shipped, read(filepath.Join(out, "deb"))) {
		t.Errorf("the .deb's copyright differs from what its binaries' modules give")
	}
	h := sha256.Sum256(read(filepath.Join(out, "full")))
	if got := rpmFiles["/usr/share/licenses/fenced/copyright"].digest; got != hex.EncodeToString(h[:]) {
		t.Errorf("the rpm's copyright (digest %s) differs from what its binaries' modules give (%x)", got, h)
	}
	spdx := strings.TrimSpace(string(read(filepath.Join(out, "spdx"))))
	if got := run(t, "rpm", "-qp", "--qf", "%{LICENSE}", rpm); got != spdx {
		t.Errorf("rpm License %q, want %q", got, spdx)
	}
	for _, id := range []string{"Apache-2.0", "MPL-2.0", "BSD-3-Clause"} { // the project, hashicorp/raft, Go
		if !strings.Contains(spdx, id) {
			t.Errorf("rpm License %q lacks %s", spdx, id)
		}
	}
	// fencectl links only the API's wire types and cobra; fenced links
	// raft, memberlist, the agents' libraries, ...
	for bin, least := range map[string]int{"usr/sbin/fenced": 10, "usr/bin/fencectl": 2} {
		bi, err := buildinfo.ReadFile(filepath.Join(root, bin))
		if err != nil {
			t.Fatalf("%s: %v (stripping must keep the build information)", bin, err)
		}
		if len(bi.Deps) < least {
			t.Fatalf("%s: only %d modules in its build information", bin, len(bi.Deps))
		}
		for _, d := range bi.Deps {
			if !bytes.Contains(shipped, []byte("\nFiles: "+d.Path+"/*\n")) {
				t.Errorf("copyright: no Files paragraph for %s (linked into /%s)", d.Path, bin)
			}
		}
	}
	for _, s := range []string{"\nFiles: *\nCopyright: " + nfpmField(t, "vendor") + "\nLicense: Apache-2.0\n", "\nFiles: go/*\n", "/usr/share/common-licenses/Apache-2.0"} {
		if !bytes.Contains(shipped, []byte(s)) {
			t.Errorf("copyright lacks %q", s)
		}
	}
}

// checkLintian runs lintian on the .deb: no error, no warning (the overrides
// the package ships say why the rest is not a defect), and no override left
// that matches nothing.
func checkLintian(t *testing.T, deb string) {
	cmd := exec.Command("lintian", "--display-info", "--pedantic", "--show-overrides", deb)
	out, err := cmd.CombinedOutput()
	t.Logf("lintian:\n%s", out)
	if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ExitCode() == 1) {
		t.Fatalf("lintian: %v", err)
	}
	overridden := 0
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "E: "), strings.HasPrefix(line, "W: "):
			t.Errorf("lintian: %s", line)
		case strings.Contains(line, "unused-override"), strings.Contains(line, "mismatched-override"):
			t.Errorf("lintian: stale override: %s", line)
		case strings.HasPrefix(line, "O: "):
			overridden++
		}
	}
	if overridden == 0 {
		t.Error("lintian reported no overridden tag: were the overrides shipped and read?")
	}
}

// checkRpmlint runs rpmlint with the project's settings and justified
// filters (packaging/rpmlint.toml, fenced.rpmlintrc): no error, no warning,
// and no filter that matches nothing (rpmlint's unused-rpmlintrc-filter).
//
// nfpm writes the payload's file names absolute (/usr/sbin/fenced), which
// rpm accepts, but rpmlint unpacks with `cpio -id` in a scratch directory,
// and GNU cpio would write absolute names to the real /: a cpio put first
// on PATH adds --no-absolute-filenames. The test checks afterwards that no
// file of the package appeared on this machine.
func checkRpmlint(t *testing.T, repo, rpm string, rpmFiles map[string]pkgFile) {
	shim := t.TempDir()
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		t.Fatalf("cpio is missing (rpmlint needs it): %v", err)
	}
	script := "#!/bin/sh\nexec " + cpio + " --no-absolute-filenames \"$@\"\n"
	if err := os.WriteFile(filepath.Join(shim, "cpio"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	existed := map[string]bool{}
	for p := range rpmFiles {
		if _, err := os.Lstat(p); err == nil {
			existed[p] = true
		}
	}
	cmd := exec.Command("rpmlint", "-c", filepath.Join(repo, "packaging", "rpmlint.toml"), "-r", filepath.Join(repo, "packaging", "fenced.rpmlintrc"), rpm)
	cmd.Env = append(os.Environ(), "PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	t.Logf("rpmlint:\n%s", out)
	var created []string
	for p := range rpmFiles {
		if _, err := os.Lstat(p); err == nil && !existed[p] {
			t.Errorf("rpmlint's unpacking created %s on this machine", p)
			created = append(created, p)
		}
	}
	// Undo exactly that: the package's own files (same digest), then the
	// directories it made, deepest first, if empty.
	sort.Slice(created, func(i, j int) bool { return len(created[i]) > len(created[j]) })
	for _, p := range created {
		if b, err := os.ReadFile(p); err == nil {
			if h := sha256.Sum256(b); hex.EncodeToString(h[:]) == rpmFiles[p].digest {
				os.Remove(p)
			}
		} else if rpmFiles[p].mode[0] == 'd' {
			os.Remove(p) // fails unless empty
		}
	}
	if err != nil {
		t.Errorf("rpmlint: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, ": E: ") || strings.Contains(line, ": W: ") {
			t.Errorf("rpmlint: %s", line)
		}
	}
	if !strings.Contains(string(out), " 0 errors, 0 warnings") {
		t.Errorf("rpmlint did not report 0 errors, 0 warnings")
	}
}
