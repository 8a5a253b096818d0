package san

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/san/fabricsim"
)

const (
	host1a = "10:00:00:00:c9:aa:00:01"
	host1b = "10:00:00:00:c9:aa:00:02"
	host2  = "10:00:00:00:c9:bb:00:01"
	host3  = "10:00:00:00:c9:cc:00:01"
	host1  = host1a + "," + host1b
)

func startFabric(t testing.TB, z fabricsim.Zoning, useTLS bool) *fabricsim.Server {
	t.Helper()
	f, err := fabricsim.New(fabricsim.Options{Users: map[string]string{"admin": "s3cret-Pa55"}, Zoning: z})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabricsim.Start(f, "127.0.0.1:0", useTLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func testParams(srv *fabricsim.Server, plug string, extra ...string) agents.Params {
	host, port, _ := strings.Cut(srv.Addr, ":")
	p := agents.Params{"ip": host, "ipport": port, "username": "admin", "password": "s3cret-Pa55", "plug": plug, "ssl": "0"}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p
}

func newAgentT(t testing.TB, p agents.Params) *Agent {
	t.Helper()
	a, err := New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// effectiveWWNs lists every member of every enabled zone, from the
// simulator's side.
func effectiveWWNs(srv *fabricsim.Server) map[string]bool {
	_, zones := srv.Effective()
	out := map[string]bool{}
	for _, z := range zones {
		for _, m := range append(z.Members, z.Principals...) {
			out[m] = true
		}
	}
	return out
}

// zoneSets maps each zone to its sorted member and principal lists, so
// orders do not matter when comparing.
func zoneSets(z fabricsim.Zoning) map[string]string {
	out := map[string]string{}
	for _, zn := range z.Zones {
		m, p := slices.Clone(zn.Members), slices.Clone(zn.Principals)
		sort.Strings(m)
		sort.Strings(p)
		out[zn.Name] = strings.Join(m, ",") + "|" + strings.Join(p, ",")
	}
	return out
}

func wantState(t *testing.T, a *Agent, want agents.State) {
	t.Helper()
	got, err := a.Status(ctxT(t))
	if err != nil || got != want {
		t.Fatalf("status = %v, %v; want %v", got, err, want)
	}
}

func TestOffRemovesExactlyTheTargetAndOnRestoresIt(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	a := newAgentT(t, testParams(srv, host1))
	before := srv.Defined()
	wantState(t, a, agents.StateOn)

	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off: %v", err)
	}
	eff := effectiveWWNs(srv)
	if eff[host1a] || eff[host1b] {
		t.Fatalf("effective configuration still holds host1: %v", eff)
	}
	for _, w := range []string{host2, host3, "50:06:01:60:3e:a0:00:01", "50:06:01:60:3e:a0:00:02"} {
		if !eff[w] {
			t.Errorf("effective configuration lost %s, which is not the target", w)
		}
	}
	after := zoneSets(srv.Defined())
	want := map[string]string{
		"z_host1_a":    "50:06:01:60:3e:a0:00:01|",
		"z_host1_b":    "50:06:01:60:3e:a0:00:02|",
		"z_host2":      "array_spa,host2_hba0|",
		"z_peer_array": host3 + "|50:06:01:60:3e:a0:00:01,50:06:01:60:3e:a0:00:02",
	}
	for z, w := range want {
		if after[z] != w {
			t.Errorf("zone %s after off = %q, want %q", z, after[z], w)
		}
	}
	records := 0
	for z := range after {
		if strings.HasPrefix(z, "fenced_") {
			records++
		}
	}
	if records != 3 { // z_host1_a, z_host1_b, z_peer_array's member list
		t.Errorf("record zones = %d, want 3: %v", records, after)
	}
	if cfg := srv.Defined().Cfgs[0]; len(cfg.Zones) != 4 {
		t.Errorf("cfg changed: %v", cfg)
	}
	wantState(t, a, agents.StateOff)

	// Off again is a confirmed no-op.
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("second off: %v", err)
	}

	if err := a.On(ctxT(t)); err != nil {
		t.Fatalf("on: %v", err)
	}
	if got, want := zoneSets(srv.Defined()), zoneSets(before); !mapsEqual(got, want) {
		t.Fatalf("after on the defined zones are\n%v\nwant the original\n%v", got, want)
	}
	eff = effectiveWWNs(srv)
	if !eff[host1a] || !eff[host1b] {
		t.Fatalf("effective configuration lacks host1 after on: %v", eff)
	}
	wantState(t, a, agents.StateOn)
	if err := a.On(ctxT(t)); err != nil {
		t.Fatalf("second on: %v", err)
	}
	if n := srv.Sessions(); n != 0 {
		t.Errorf("%d REST sessions left open", n)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestFenceByAliasAndByWWNBehindAlias(t *testing.T) {
	for _, plug := range []string{"host2_hba0", strings.ToUpper(host2)} {
		t.Run(plug, func(t *testing.T) {
			srv := startFabric(t, fabricsim.ExampleZoning(), false)
			a := newAgentT(t, testParams(srv, plug))
			before := zoneSets(srv.Defined())
			if err := a.Off(ctxT(t)); err != nil {
				t.Fatalf("off: %v", err)
			}
			if effectiveWWNs(srv)[host2] {
				t.Fatal("host2 still in the effective configuration")
			}
			if got := zoneSets(srv.Defined())["z_host2"]; got != "array_spa|" {
				t.Fatalf("z_host2 = %q", got)
			}
			wantState(t, a, agents.StateOff)
			if err := a.On(ctxT(t)); err != nil {
				t.Fatalf("on: %v", err)
			}
			if got := zoneSets(srv.Defined()); !mapsEqual(got, before) {
				t.Fatalf("not restored: %v", got)
			}
			wantState(t, a, agents.StateOn)
		})
	}
}

func TestConflictOnceIsRetried(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	srv.SetFaults(fabricsim.Faults{ConcurrentChanges: 1})
	a := newAgentT(t, testParams(srv, host1))
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off after one conflict: %v", err)
	}
	if st := srv.Stats(); st.Conflicts != 1 || st.Enables != 1 {
		t.Fatalf("stats %+v: want one conflict then one enable", st)
	}
	if eff := effectiveWWNs(srv); eff[host1a] || eff[host1b] {
		t.Fatal("host1 still effective")
	}
	// The other administrator's change survives ours.
	if _, ok := zoneSets(srv.Defined())["sim_other_admin"]; !ok {
		t.Fatal("the concurrent administrator's change was lost")
	}
}

func TestPersistentConflictIsReported(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	srv.SetFaults(fabricsim.Faults{ConcurrentChanges: -1})
	a := newAgentT(t, testParams(srv, host1, "conflict_retries", "2"))
	err := a.Off(ctxT(t))
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("off = %v; want a failure naming the checksum mismatch after 3 attempts", err)
	}
	if st := srv.Stats(); st.Conflicts != 3 || st.Enables != 0 {
		t.Fatalf("stats %+v", st)
	}
	if eff := effectiveWWNs(srv); !eff[host1a] {
		t.Fatal("host1 left the effective configuration although off failed")
	}
	for z := range zoneSets(srv.Defined()) {
		if strings.HasPrefix(z, "fenced_") {
			t.Fatalf("record zone %s committed although off failed", z)
		}
	}
	srv.SetFaults(fabricsim.Faults{})
	wantState(t, a, agents.StateOn)
}

func TestEnableWithoutEffectFailsAfterTimeout(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	srv.SetFaults(fabricsim.Faults{EnableNoEffect: true})
	a := newAgentT(t, testParams(srv, host1, "zoning_timeout", "0.4"))
	start := time.Now()
	err := a.Off(ctxT(t))
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "still contains") {
		t.Fatalf("off = %v; want failure: effective still contains the target", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("gave up after %v, before the zoning timeout", d)
	}
	wantState(t, a, agents.StateOn)
}

func TestSlowEffectiveIsWaitedFor(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	srv.SetFaults(fabricsim.Faults{EffectiveDelay: 300 * time.Millisecond})
	a := newAgentT(t, testParams(srv, host1))
	start := time.Now()
	if err := a.Off(ctxT(t)); err != nil {
		t.Fatalf("off: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("off returned after %v, before the change was effective", d)
	}
	if eff := effectiveWWNs(srv); eff[host1a] {
		t.Fatal("host1 still effective")
	}
}

func TestWrongPasswordIsAuthFailure(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	a := newAgentT(t, testParams(srv, host1, "password", "wr0ng-Secret-xyz"))
	for name, fn := range map[string]func(context.Context) error{
		"off": a.Off, "on": a.On, "monitor": a.Monitor,
		"status": func(ctx context.Context) error { _, err := a.Status(ctx); return err },
	} {
		err := fn(ctxT(t))
		if !errors.Is(err, agents.ErrAuth) || !errors.Is(err, agents.ErrFailed) {
			t.Errorf("%s = %v; want an authentication failure", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "wr0ng-Secret-xyz") {
			t.Errorf("%s error shows the password: %v", name, err)
		}
	}
}

func TestPasswordFile(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	f := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(f, []byte("s3cret-Pa55\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testParams(srv, host1)
	delete(p, "password")
	p["password_file"] = f
	if err := newAgentT(t, p).Monitor(ctxT(t)); err != nil {
		t.Fatalf("monitor with password_file: %v", err)
	}
}

func TestServerErrors(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	a := newAgentT(t, testParams(srv, host1))
	srv.SetFaults(fabricsim.Faults{ServerErrors: 1})
	err := a.Monitor(ctxT(t))
	if !errors.Is(err, agents.ErrFailed) || errors.Is(err, agents.ErrAuth) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("monitor with a 503 = %v", err)
	}
	if err := a.Monitor(ctxT(t)); err != nil {
		t.Fatalf("monitor after the fault: %v", err)
	}
	srv.SetFaults(fabricsim.Faults{ServerErrors: 1})
	if err := a.Off(ctxT(t)); !errors.Is(err, agents.ErrFailed) {
		t.Fatalf("off with a 503 at login = %v", err)
	}
	if !effectiveWWNs(srv)[host1a] {
		t.Fatal("off failed at login but the fabric changed")
	}
}

func TestNoEnabledCfg(t *testing.T) {
	z := fabricsim.ExampleZoning()
	z.Enabled = ""
	srv := startFabric(t, z, false)
	a := newAgentT(t, testParams(srv, host1))
	if err := a.Off(ctxT(t)); !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "no zone configuration is enabled") {
		t.Fatalf("off = %v", err)
	}
	wantState(t, a, agents.StateOff) // default zone: no access
}

func TestZoneOfOnlyTargetIsRefused(t *testing.T) {
	z := fabricsim.ExampleZoning()
	z.Zones = append(z.Zones, fabricsim.Zone{Name: "z_host1_pair", Members: []string{host1a, host1b}})
	z.Cfgs[0].Zones = append(z.Cfgs[0].Zones, "z_host1_pair")
	srv := startFabric(t, z, false)
	a := newAgentT(t, testParams(srv, host1))
	err := a.Off(ctxT(t))
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "z_host1_pair") {
		t.Fatalf("off = %v", err)
	}
	if srv.Stats().Enables != 0 {
		t.Fatal("something was enabled")
	}
}

func TestTLS(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), true)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := newAgentT(t, testParams(srv, host1, "ssl", "1", "ca_file", ca)).Monitor(ctxT(t)); err != nil {
		t.Fatalf("monitor with ca_file: %v", err)
	}
	if err := newAgentT(t, testParams(srv, host1, "ssl", "1", "ssl_insecure", "1")).Monitor(ctxT(t)); err != nil {
		t.Fatalf("monitor with ssl_insecure: %v", err)
	}
	err := newAgentT(t, testParams(srv, host1, "ssl", "1")).Monitor(ctxT(t))
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("monitor of an unknown certificate = %v; want a certificate failure", err)
	}
}

func TestNewValidatesAllAtOnce(t *testing.T) {
	_, err := New(agents.Params{"ipport": "70000", "plug": "not a wwn!", "fabric": "cisco", "zoning_timeout": "x", "bogus": "1", "password": "hunter2-Secret"}, nil)
	if err == nil {
		t.Fatal("New accepted bad parameters")
	}
	for _, want := range []string{"ip: required", "username: required", "ipport", "plug", "cisco", "zoning_timeout", "bogus: unknown"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "hunter2-Secret") {
		t.Errorf("error shows the password: %v", err)
	}
	if _, err := New(agents.Params{"ip": "127.0.0.1", "username": "u", "password_file": "/nonexistent", "plug": host1a}, nil); err != nil {
		t.Fatalf("New with valid parameters: %v", err)
	}
	if k, ok := agents.Default.Lookup("san"); !ok || k.New == nil {
		t.Fatal("san is not registered")
	}
}

func TestParsePlug(t *testing.T) {
	for _, tc := range []struct {
		in, plug string
		err      bool
	}{
		{in: "10:00:00:00:C9:AA:00:01", plug: "10:00:00:00:c9:aa:00:01"},
		{in: " b_alias ; 10:00:00:00:c9:aa:00:01,b_alias", plug: "10:00:00:00:c9:aa:00:01,b_alias"},
		{in: "", err: true},
		{in: "10:00:00:00:c9:aa:00", err: true},
		{in: "1,2", err: true},
	} {
		tg, err := parsePlug(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("parsePlug(%q) error = %v", tc.in, err)
			continue
		}
		if err == nil && tg.plug != tc.plug {
			t.Errorf("parsePlug(%q) = %q, want %q", tc.in, tg.plug, tc.plug)
		}
	}
}

func TestMixedAliasIsRefused(t *testing.T) {
	z := fabricsim.ExampleZoning()
	z.Aliases = append(z.Aliases, fabricsim.Alias{Name: "shared", Members: []string{host1a, host3}})
	z.Zones = append(z.Zones, fabricsim.Zone{Name: "z_shared", Members: []string{"shared", "array_spa"}})
	z.Cfgs[0].Zones = append(z.Cfgs[0].Zones, "z_shared")
	srv := startFabric(t, z, false)
	err := newAgentT(t, testParams(srv, host1)).Off(ctxT(t))
	if !errors.Is(err, agents.ErrFailed) || !strings.Contains(err.Error(), "alias shared") {
		t.Fatalf("off = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"Response":{"defined-configuration":{"zone":[{"zone-name":"z","member-entry":{"entry-name":["10:00:00:00:c9:aa:00:01"]}}],"alias":{"alias-name":"a","member-entry":{"alias-entry-name":"10:00:00:00:c9:aa:00:01"}},"cfg":[{"cfg-name":"c","member-zone":{"zone-name":"z"}}]}}}`))
	f.Add([]byte(`{"Response":{"effective-configuration":{"cfg-name":"c","checksum":"ab","default-zone-access":"0","enabled-zone":{"zone-name":"z","zone-type":1,"member-entry":{"principal-entry-name":["x"]}}}}}`))
	f.Add([]byte(`{"errors":{"error":[{"error-type":"application","error-tag":"operation-failed","error-message":"Checksum mismatch"}]}}`))
	f.Add([]byte(`{"Response":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if db, err := parseDefined(b); err == nil {
			tg, _ := parsePlug("10:00:00:00:c9:aa:00:01,a")
			if w, err := tg.resolve(db); err == nil {
				planOff(db, tg, w)
			}
			planOn(db, tg)
		}
		if e, err := parseEffective(b); err == nil {
			present(e, map[string]bool{"x": true})
		}
		parseFOSError(b)
	})
}

// BenchmarkOffConfirmed measures off up to a confirmed read-back of the
// effective configuration (login, reads, transaction, enable, read-back,
// logout) over HTTP and HTTPS; on, untimed, puts the target back in
// between. It reports the median as well as the mean.
func BenchmarkOffConfirmed(b *testing.B) {
	for _, useTLS := range []bool{false, true} {
		name := "http"
		if useTLS {
			name = "https"
		}
		b.Run(name, func(b *testing.B) {
			srv := startFabric(b, fabricsim.ExampleZoning(), useTLS)
			p := testParams(srv, host1)
			if useTLS {
				p["ssl"], p["ssl_insecure"] = "1", "1"
			}
			a := newAgentT(b, p)
			ctx := ctxT(b)
			var ds []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := a.Off(ctx); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				b.StopTimer()
				if err := a.On(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
		})
	}
}

func TestCancelledWhileWaitingIsUnknown(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	srv.SetFaults(fabricsim.Faults{EnableNoEffect: true})
	a := newAgentT(t, testParams(srv, host1))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := a.Off(ctx)
	if !errors.Is(err, agents.ErrOutcomeUnknown) {
		t.Fatalf("off cancelled after the enable was accepted = %v; want outcome unknown", err)
	}
	if srv.Stats().Enables != 1 {
		t.Fatalf("stats %+v", srv.Stats())
	}
}

func TestPartlyZonedIsOn(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	if err := newAgentT(t, testParams(srv, host1a)).Off(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// host1b is still zoned in: host1 can still reach storage.
	wantState(t, newAgentT(t, testParams(srv, host1)), agents.StateOn)
	if err := newAgentT(t, testParams(srv, host1)).Off(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wantState(t, newAgentT(t, testParams(srv, host1)), agents.StateOff)
	// Each target unfences what it fenced.
	if err := newAgentT(t, testParams(srv, host1)).On(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if eff := effectiveWWNs(srv); eff[host1a] || !eff[host1b] {
		t.Fatalf("after host1's on: host1a %v (fenced on its own, want still out), host1b %v", eff[host1a], eff[host1b])
	}
	if err := newAgentT(t, testParams(srv, host1a)).On(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wantState(t, newAgentT(t, testParams(srv, host1)), agents.StateOn)
}

// TestRacingAdministrator commits zoning changes from another session while
// off runs: off must either land its change with the other's intact, or
// report the conflict; never lose either silently.
func TestRacingAdministrator(t *testing.T) {
	srv := startFabric(t, fabricsim.ExampleZoning(), false)
	a := newAgentT(t, testParams(srv, host1, "conflict_retries", "8"))
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				srv.AdminChange()
				n++
			}
		}
	}()
	err := a.Off(ctxT(t))
	close(stop)
	changes := <-done
	// The scratch zone is toggled by each of the other admin's commits: its
	// presence shows whether the last of them survived ours.
	if _, ok := zoneSets(srv.Defined())["sim_other_admin"]; ok != (changes%2 == 1) {
		t.Fatalf("after %d commits by the other admin their scratch zone present = %v: a change was lost", changes, ok)
	}
	st := srv.Stats()
	t.Logf("off = %v after %d conflicts; the other admin committed %d times", err, st.Conflicts, changes)
	if err != nil {
		if !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("off failed for another reason: %v", err)
		}
		if !effectiveWWNs(srv)[host1a] {
			t.Fatal("off failed but host1 left the effective configuration")
		}
		return
	}
	if eff := effectiveWWNs(srv); eff[host1a] || eff[host1b] {
		t.Fatal("off succeeded but host1 is effective")
	}
	if got := zoneSets(srv.Defined())["z_host1_a"]; got != "50:06:01:60:3e:a0:00:01|" {
		t.Fatalf("z_host1_a = %q after a successful off", got)
	}
}
