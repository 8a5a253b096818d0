package ipmisim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
)

// The pyghmi BMC and each of its quirks, checked with ipmitool, an
// independent console: what ipmitool accepts and refuses here is what the
// quirk is meant to be, so the agent's tests against it can be trusted.

func startPyghmi(t *testing.T, cfg PyghmiConfig) *Pyghmi {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the pyghmi BMC")
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	b, err := StartPyghmi(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func stats(t *testing.T, b *Pyghmi) PyghmiStats {
	t.Helper()
	st, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func wantIpmitool(t *testing.T, b *Pyghmi, cipher string, ok bool, want string, args ...string) {
	t.Helper()
	out, err := ipmitool(t, b.Port(), cipher, args...)
	if (err == nil) != ok || !strings.Contains(out, want) {
		t.Fatalf("ipmitool -C %s %s: %v: %s\nwant success %v and %q", cipher, strings.Join(args, " "), err, out, ok, want)
	}
}

func TestPyghmiHonest(t *testing.T) {
	b := startPyghmi(t, PyghmiConfig{})
	for _, cipher := range []string{"17", "3"} {
		wantIpmitool(t, b, cipher, true, "is on", "chassis", "power", "status")
	}
	wantIpmitool(t, b, "17", true, "Down/Off", "chassis", "power", "off")
	if on, err := b.PoweredOn(); err != nil || on {
		t.Fatalf("after power off: on %v (%v)", on, err)
	}
	wantIpmitool(t, b, "17", true, "is off", "chassis", "power", "status")
	if err := b.SetPower(true); err != nil {
		t.Fatal(err)
	}
	wantIpmitool(t, b, "3", true, "is on", "chassis", "power", "status")
	// 15 bytes: ipmitool shows the auxiliary firmware revision.
	wantIpmitool(t, b, "17", true, "Aux Firmware Rev Info", "mc", "info")
	wantIpmitool(t, b, "17", true, "17   N/A     hmac_sha256     sha256_128", "channel", "getciphers", "ipmi")
	st := stats(t, b)
	if st.PowerCommands != 1 || st.BySuite["17"] == 0 || st.BySuite["3"] == 0 || st.Sessions != 0 || st.HostileReplies != 0 {
		t.Fatalf("stats %+v", st)
	}
	out, err := ipmitool(t, b.Port(), "17", "-U", "nobody", "chassis", "power", "status")
	if err == nil {
		t.Fatalf("an unknown user was let in: %s", out)
	}
}

// ipmitool copes with pyghmi's 14-byte Get Device ID (go-ipmi does not).
func TestPyghmiMalformedDeviceIDIpmitool(t *testing.T) {
	b := startPyghmi(t, PyghmiConfig{MalformedDeviceID: true})
	out, err := ipmitool(t, b.Port(), "17", "mc", "info")
	if err != nil || !strings.Contains(out, "IPMI Version") || strings.Contains(out, "Aux Firmware Rev Info") {
		t.Fatalf("mc info: %v: %s", err, out)
	}
}

func TestPyghmiNoSuite17Ipmitool(t *testing.T) {
	b := startPyghmi(t, PyghmiConfig{NoSuite17: true})
	wantIpmitool(t, b, "17", false, "no matching cipher suite", "chassis", "power", "status")
	wantIpmitool(t, b, "3", true, "is on", "chassis", "power", "status")
	out, err := ipmitool(t, b.Port(), "3", "channel", "getciphers", "ipmi")
	if err != nil || !strings.Contains(out, "3    N/A     hmac_sha1") || strings.Contains(out, "17   N/A") {
		t.Fatalf("channel getciphers: %v: %s", err, out)
	}
	if st := stats(t, b); st.Refused != 1 || !strings.Contains(st.LastRefusal, "0x11") {
		t.Fatalf("stats %+v", st)
	}
}

// ipmitool, like go-ipmi v0.9.1, takes a reply without integrity inside an
// authenticated session; a wrong AuthCode it refuses.
func TestPyghmiHostileRepliesIpmitool(t *testing.T) {
	b := startPyghmi(t, PyghmiConfig{NoIntegrity: true})
	wantIpmitool(t, b, "17", true, "is on", "chassis", "power", "status")
	if st := stats(t, b); st.HostileReplies == 0 {
		t.Fatalf("no reply sent without integrity: %+v", st)
	}

	b = startPyghmi(t, PyghmiConfig{BadIntegrity: true})
	wantIpmitool(t, b, "17", false, "invalid authcode", "chassis", "power", "status")

	// Limited to Get Chassis Status, then switched at run time.
	b = startPyghmi(t, PyghmiConfig{HostileCommands: []Command{CmdGetChassisStatus}})
	wantIpmitool(t, b, "17", true, "is on", "chassis", "power", "status")
	if err := b.SetReplyQuirk(ReplyBadIntegrity); err != nil {
		t.Fatal(err)
	}
	// The login passes (its replies are honest); the status reply is refused.
	out, err := ipmitool(t, b.Port(), "17", "chassis", "power", "status")
	if err == nil || !strings.Contains(out, "invalid authcode") || strings.Contains(out, "Unable to establish") {
		t.Fatalf("status with a bad AuthCode on its reply only: %v: %s", err, out)
	}
	if st := stats(t, b); st.HostileReplies == 0 || st.ReplyQuirk != ReplyBadIntegrity {
		t.Fatalf("stats %+v", st)
	}
	if err := b.SetReplyQuirk(ReplyHonest); err != nil {
		t.Fatal(err)
	}
	wantIpmitool(t, b, "17", true, "is on", "chassis", "power", "status")
}

func TestPyghmiHostileHandshakesIpmitool(t *testing.T) {
	b := startPyghmi(t, PyghmiConfig{Downgrade: true})
	wantIpmitool(t, b, "17", false, "Authentication algorithm 0x01 is not what we requested 0x03", "chassis", "power", "status")
	wantIpmitool(t, b, "3", true, "is on", "chassis", "power", "status")
	if st := stats(t, b); st.Downgraded != 1 {
		t.Fatalf("stats %+v", st)
	}

	b = startPyghmi(t, PyghmiConfig{SkipPassword: true})
	wantIpmitool(t, b, "17", false, "RAKP 2 HMAC is invalid", "-v", "chassis", "power", "status")
	if st := stats(t, b); st.SkippedPassword != 1 || st.Established != 0 {
		t.Fatalf("stats %+v", st)
	}

	b = startPyghmi(t, PyghmiConfig{RAKPNone: true})
	wantIpmitool(t, b, "17", false, "Authentication algorithm 0x00 is not what we requested 0x03", "chassis", "power", "status")
}

// A session limit of 1: while one session is open, the next Open Session
// is refused for lack of resources; once it is closed, or expired, a new
// one opens.
func TestPyghmiSessionLimit(t *testing.T) {
	b := startPyghmi(t, PyghmiConfig{SessionLimit: 1, SessionTimeout: 2 * time.Second})
	ctx := context.Background()
	hold := func() *client.Client {
		c, err := client.NewClient(b.Host(), b.Port(), "admin", "password")
		if err != nil {
			t.Fatal(err)
		}
		c.WithInterface(client.InterfaceLanplus).WithCipherSuiteID(17).WithTimeout(2 * time.Second)
		if err := c.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := hold()
	wantIpmitool(t, b, "17", false, "insufficient resources", "chassis", "power", "status")
	if st := stats(t, b); st.Sessions != 1 || !strings.Contains(st.LastRefusal, "0x01") {
		t.Fatalf("stats %+v", st)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wantIpmitool(t, b, "17", true, "is on", "chassis", "power", "status")

	hold() // left open, idle: expires after the session timeout
	wantIpmitool(t, b, "17", false, "insufficient resources", "chassis", "power", "status")
	time.Sleep(2500 * time.Millisecond)
	wantIpmitool(t, b, "17", true, "is on", "chassis", "power", "status")
}

// Without python3-pyghmi the error says which package to install (here an
// interpreter that does not see Debian's modules).
func TestPyghmiMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs python3")
	}
	dir := t.TempDir()
	py := filepath.Join(dir, "python-without-site")
	if err := os.WriteFile(py, []byte("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := StartPyghmi(context.Background(), PyghmiConfig{Dir: dir, Python: py})
	if err == nil || !strings.Contains(err.Error(), "install the Debian package python3-pyghmi") {
		t.Fatalf("start without pyghmi = %v", err)
	}
}
