package fabricsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// client is a bare FOS REST client, independent of the san agent, so the
// simulator's wire behaviour is tested on its own.
type client struct {
	t     *testing.T
	base  string
	token string
}

func login(t *testing.T, srv *Server, user, pass string) *client {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/rest/login", nil)
	req.SetBasicAuth(user, pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Authorization"), "Custom_Basic ") {
		t.Fatalf("login: %d, Authorization %q", resp.StatusCode, resp.Header.Get("Authorization"))
	}
	return &client{t: t, base: srv.URL, token: resp.Header.Get("Authorization")}
}

func (c *client) do(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Authorization", c.token)
	req.Header.Set("Content-Type", "application/yang-data+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			c.t.Fatalf("%s %s: answer is not JSON: %s", method, path, b)
		}
	}
	return resp.StatusCode, m
}

func (c *client) checksum() string {
	c.t.Helper()
	st, m := c.do("GET", "/rest/running/brocade-zone/effective-configuration/checksum", "")
	if st != 200 {
		c.t.Fatalf("checksum: %d %v", st, m)
	}
	return m["Response"].(map[string]any)["checksum"].(string)
}

func errMsg(m map[string]any) string {
	e := m["errors"].(map[string]any)["error"].([]any)[0].(map[string]any)
	return e["error-tag"].(string) + ": " + e["error-message"].(string)
}

func start(t *testing.T) *Server {
	t.Helper()
	f, err := New(Options{Zoning: ExampleZoning()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(f, "127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

const removeHost1a = `{"defined-configuration":{"zone":[{"zone-name":"z_host1_a","member-entry":{"entry-name":["10:00:00:00:c9:aa:00:01"]}}]}}`

func TestTransactionIsPrivateUntilSaved(t *testing.T) {
	srv := start(t)
	a, b := login(t, srv, "admin", "password"), login(t, srv, "admin", "password")
	sum := a.checksum()
	if st, m := a.do("DELETE", "/rest/running/brocade-zone/defined-configuration", removeHost1a); st != 204 {
		t.Fatalf("delete member: %d %v", st, m)
	}
	members := func(c *client) string {
		_, m := c.do("GET", "/rest/running/brocade-zone/defined-configuration/zone", "")
		for _, z := range m["Response"].(map[string]any)["zone"].([]any) {
			z := z.(map[string]any)
			if z["zone-name"] == "z_host1_a" {
				b, _ := json.Marshal(z["member-entry"])
				return string(b)
			}
		}
		return ""
	}
	if got := members(a); strings.Contains(got, "c9:aa:00:01") {
		t.Fatalf("session a does not see its own transaction: %s", got)
	}
	if got := members(b); !strings.Contains(got, "c9:aa:00:01") {
		t.Fatalf("session b sees a's uncommitted transaction: %s", got)
	}
	if a.checksum() != sum {
		t.Fatal("checksum moved before save")
	}
	_, m := a.do("GET", "/rest/running/brocade-zone/effective-configuration", "")
	if tok := m["Response"].(map[string]any)["effective-configuration"].(map[string]any)["transaction-token"]; tok == float64(0) {
		t.Fatal("no transaction-token while a transaction is open")
	}
	// Save needs the checksum.
	if st, m := a.do("PATCH", "/rest/running/brocade-zone/effective-configuration", `{"effective-configuration":{"cfg-action":1}}`); st != 400 || !strings.Contains(errMsg(m), "Checksum is required") {
		t.Fatalf("save without checksum: %d %v", st, m)
	}
	if st, m := a.do("PATCH", "/rest/running/brocade-zone/effective-configuration", `{"effective-configuration":{"cfg-action":1,"checksum":"`+sum+`"}}`); st != 204 {
		t.Fatalf("save: %d %v", st, m)
	}
	if b.checksum() == sum {
		t.Fatal("checksum did not change on save")
	}
	if got := members(b); strings.Contains(got, "c9:aa:00:01") {
		t.Fatalf("saved change not visible to b: %s", got)
	}
	// Saved is not enabled: the effective configuration is unchanged.
	_, zones := srv.Effective()
	if !strings.Contains(strings.Join(zones[0].Members, ","), "c9:aa:00:01") {
		t.Fatalf("save changed the effective configuration: %v", zones[0])
	}
}

func TestStaleTransactionIsRefused(t *testing.T) {
	srv := start(t)
	a, b := login(t, srv, "admin", "password"), login(t, srv, "admin", "password")
	sumA := a.checksum()
	a.do("DELETE", "/rest/running/brocade-zone/defined-configuration", removeHost1a)
	// b commits something first.
	b.do("POST", "/rest/running/brocade-zone/defined-configuration", `{"defined-configuration":{"alias":[{"alias-name":"new_alias","member-entry":{"alias-entry-name":["10:00:00:00:c9:dd:00:01"]}}]}}`)
	if st, m := b.do("PATCH", "/rest/running/brocade-zone/effective-configuration", `{"effective-configuration":{"cfg-name":"cfg_prod","checksum":"`+b.checksum()+`"}}`); st != 204 {
		t.Fatalf("b enable: %d %v", st, m)
	}
	// a with its old checksum, and a with a fresh checksum but a stale
	// transaction, are both refused.
	st, m := a.do("PATCH", "/rest/running/brocade-zone/effective-configuration", `{"effective-configuration":{"cfg-name":"cfg_prod","checksum":"`+sumA+`"}}`)
	if st != 400 || !strings.Contains(errMsg(m), "Checksum mismatch") {
		t.Fatalf("stale checksum: %d %v", st, m)
	}
	a.do("DELETE", "/rest/running/brocade-zone/defined-configuration", removeHost1a)
	b.AdminLike(t)
	st, m = a.do("PATCH", "/rest/running/brocade-zone/effective-configuration", `{"effective-configuration":{"cfg-name":"cfg_prod","checksum":"`+a.checksum()+`"}}`)
	if st != 400 || !strings.Contains(errMsg(m), "Checksum mismatch") {
		t.Fatalf("stale transaction: %d %v", st, m)
	}
	if got := srv.Stats().Conflicts; got != 2 {
		t.Fatalf("conflicts = %d", got)
	}
}

// AdminLike commits a change from c's session via save.
func (c *client) AdminLike(t *testing.T) {
	sum := c.checksum()
	c.do("POST", "/rest/running/brocade-zone/defined-configuration", `{"defined-configuration":{"alias":[{"alias-name":"another","member-entry":{"alias-entry-name":["10:00:00:00:c9:dd:00:02"]}}]}}`)
	if st, m := c.do("PATCH", "/rest/running/brocade-zone/effective-configuration", `{"effective-configuration":{"cfg-action":1,"checksum":"`+sum+`"}}`); st != 204 {
		t.Fatalf("save: %d %v", st, m)
	}
}

func TestErrorsAndAuth(t *testing.T) {
	srv := start(t)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/rest/login", nil)
	req.SetBasicAuth("admin", "nope")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("bad password: %d", resp.StatusCode)
	}
	bad := &client{t: t, base: srv.URL, token: "Custom_Basic forged"}
	if st, m := bad.do("GET", "/rest/running/brocade-zone/effective-configuration", ""); st != 401 || !strings.HasPrefix(errMsg(m), "access-denied") {
		t.Fatalf("forged token: %d %v", st, m)
	}
	c := login(t, srv, "admin", "password")
	for _, tc := range []struct{ method, body, want string }{
		{"DELETE", `{"defined-configuration":{"zone":[{"zone-name":"z_host1_a","member-entry":{"entry-name":["10:00:00:00:c9:ff:00:01"]}}]}}`, "is not a member"},
		{"DELETE", `{"defined-configuration":{"zone":[{"zone-name":"z_host1_a","member-entry":{"entry-name":["10:00:00:00:c9:aa:00:01","50:06:01:60:3e:a0:00:01"]}}]}}`, "would have no members"},
		{"POST", `{"defined-configuration":{"zone":[{"zone-name":"1bad"}]}}`, "Invalid zone name"},
		{"POST", `{"defined-configuration":{"zone":[{"zone-name":"zz","member-entry":{"entry-name":["bad member!"]}}]}}`, "invalid member"},
		{"PATCH", `{"defined-configuration":{"zone":[{"zone-name":"nozone","member-entry":{"entry-name":["a1"]}}]}}`, "does not exist"},
		{"POST", `not json`, "Invalid request body"},
	} {
		st, m := c.do(tc.method, "/rest/running/brocade-zone/defined-configuration", tc.body)
		if st != 400 || !strings.Contains(errMsg(m), tc.want) {
			t.Errorf("%s %s: %d %v; want %q", tc.method, tc.body, st, m, tc.want)
		}
	}
	// A failed request leaves the transaction as it was: nothing to abort.
	if st, m := c.do("PATCH", "/rest/running/brocade-zone/effective-configuration", `{"effective-configuration":{"cfg-action":4}}`); st != 400 || !strings.Contains(errMsg(m), "No outstanding") {
		t.Fatalf("abort after only failed requests: %d %v; want no transaction", st, m)
	}
	if st, _ := c.do("POST", "/rest/logout", ""); st != 204 {
		t.Fatalf("logout: %d", st)
	}
	if st, _ := c.do("GET", "/rest/running/brocade-zone/effective-configuration", ""); st != 401 {
		t.Fatalf("after logout: %d", st)
	}
}

func TestLoopbackOnly(t *testing.T) {
	f, _ := New(Options{})
	if _, err := Start(f, "0.0.0.0:0", false); err == nil {
		t.Fatal("Start accepted a non-loopback address")
	}
}

func TestEnableResolvesAliases(t *testing.T) {
	srv := start(t)
	_, zones := srv.Effective()
	for _, z := range zones {
		if z.Name == "z_host2" {
			if strings.Join(z.Members, ",") != "10:00:00:00:c9:bb:00:01,50:06:01:60:3e:a0:00:01" {
				t.Fatalf("z_host2 effective members %v: aliases not resolved", z.Members)
			}
			return
		}
	}
	t.Fatal("z_host2 not effective")
}
