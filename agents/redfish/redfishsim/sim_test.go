package redfishsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type client struct {
	t     *testing.T
	base  string
	token string
	basic [2]string
}

func (c *client) do(method, path string, body any, hdr map[string]string) (*http.Response, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("X-Auth-Token", c.token)
	}
	if c.basic[0] != "" {
		req.SetBasicAuth(c.basic[0], c.basic[1])
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &doc); err != nil {
			c.t.Fatalf("%s %s: answer is not JSON: %v: %q", method, path, err, raw)
		}
	}
	return resp, doc
}

func (c *client) login(user, pass string) string {
	c.t.Helper()
	resp, doc := c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": user, "Password": pass}, nil)
	if resp.StatusCode != http.StatusCreated {
		c.t.Fatalf("login: %d %v", resp.StatusCode, doc)
	}
	if resp.Header.Get("X-Auth-Token") == "" || resp.Header.Get("Location") == "" {
		c.t.Fatalf("login: missing token or Location: %v", resp.Header)
	}
	c.token = resp.Header.Get("X-Auth-Token")
	return resp.Header.Get("Location")
}

func start(t *testing.T, opts Options) (*Sim, *client) {
	t.Helper()
	sim, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.Close() })
	return sim, &client{t: t, base: srv.URL}
}

func wantError(t *testing.T, doc map[string]any, messageID string) {
	t.Helper()
	e, _ := doc["error"].(map[string]any)
	info, _ := e["@Message.ExtendedInfo"].([]any)
	if e == nil || e["code"] == nil || len(info) == 0 {
		t.Fatalf("not a Redfish error: %v", doc)
	}
	if id := info[0].(map[string]any)["MessageId"].(string); !strings.HasSuffix(id, "."+messageID) {
		t.Fatalf("MessageId %s, want %s", id, messageID)
	}
}

func TestServiceRootAndAuth(t *testing.T) {
	_, c := start(t, Options{})
	resp, doc := c.do("GET", "/redfish", nil, nil)
	if resp.StatusCode != 200 || doc["v1"] != "/redfish/v1/" {
		t.Fatalf("/redfish: %d %v", resp.StatusCode, doc)
	}
	resp, doc = c.do("GET", "/redfish/v1/", nil, nil)
	if resp.StatusCode != 200 || doc["RedfishVersion"] != "1.15.0" || resp.Header.Get("OData-Version") != "4.0" {
		t.Fatalf("service root without auth: %d %v %v", resp.StatusCode, resp.Header, doc["RedfishVersion"])
	}
	resp, doc = c.do("GET", "/redfish/v1/Systems", nil, nil)
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("Systems without auth: %d", resp.StatusCode)
	}
	wantError(t, doc, "NoValidSession")

	c.basic = [2]string{"admin", "wrong"}
	if resp, _ = c.do("GET", "/redfish/v1/Systems", nil, nil); resp.StatusCode != 401 {
		t.Fatalf("bad Basic: %d", resp.StatusCode)
	}
	c.basic = [2]string{"admin", "password"}
	if resp, _ = c.do("GET", "/redfish/v1/Systems", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("Basic: %d", resp.StatusCode)
	}
	c.basic = [2]string{}

	resp, doc = c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": "admin", "Password": "nope"}, nil)
	if resp.StatusCode != 401 || strings.Contains(mustJSON(doc), "nope") {
		t.Fatalf("bad login: %d %v", resp.StatusCode, doc)
	}
	resp, doc = c.do("POST", "/redfish/v1/SessionService/Sessions", `{"UserName": "admin"`, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("malformed login: %d", resp.StatusCode)
	}
	wantError(t, doc, "MalformedJSON")
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestSessions(t *testing.T) {
	sim, c := start(t, Options{SessionTimeout: 200 * time.Millisecond})
	loc := c.login("admin", "password")
	if n := sim.OpenSessions(); n != 1 {
		t.Fatalf("open sessions %d, want 1", n)
	}
	resp, doc := c.do("GET", "/redfish/v1/SessionService/Sessions", nil, nil)
	if resp.StatusCode != 200 || doc["Members@odata.count"].(float64) != 1 {
		t.Fatalf("sessions: %d %v", resp.StatusCode, doc)
	}
	if resp, _ = c.do("DELETE", loc, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, _ = c.do("GET", "/redfish/v1/Systems", nil, nil); resp.StatusCode != 401 {
		t.Fatalf("token after logout: %d", resp.StatusCode)
	}
	if n := sim.OpenSessions(); n != 0 {
		t.Fatalf("open sessions %d after logout", n)
	}
	// Idle timeout.
	c.login("admin", "password")
	time.Sleep(300 * time.Millisecond)
	if resp, _ = c.do("GET", "/redfish/v1/Systems", nil, nil); resp.StatusCode != 401 {
		t.Fatalf("token after timeout: %d", resp.StatusCode)
	}
	if n := sim.OpenSessions(); n != 0 {
		t.Fatalf("open sessions %d after timeout", n)
	}
}

func TestResetEtagAndErrors(t *testing.T) {
	sim, c := start(t, Options{Users: []User{{Name: "admin", Password: "password"}, {Name: "viewer", Password: "viewpass", Role: RoleReadOnly}}})
	c.login("admin", "password")
	sysURI := "/redfish/v1/Systems/437XR1138R2"
	resp, doc := c.do("GET", sysURI, nil, nil)
	etag := resp.Header.Get("ETag")
	if etag == "" || doc["@odata.etag"] != etag || doc["PowerState"] != "On" {
		t.Fatalf("system: etag %q body %v", etag, doc["@odata.etag"])
	}
	target := sysURI + "/Actions/ComputerSystem.Reset"
	resp, doc = c.do("POST", target, map[string]string{"ResetType": "Bogus"}, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("bogus reset: %d", resp.StatusCode)
	}
	wantError(t, doc, "ActionParameterValueNotInList")
	if resp, doc = c.do("POST", target, map[string]any{}, nil); resp.StatusCode != 400 {
		t.Fatalf("reset without ResetType: %d", resp.StatusCode)
	}
	wantError(t, doc, "ActionParameterMissing")

	if resp, _ = c.do("POST", target, map[string]string{"ResetType": "ForceOff"}, map[string]string{"If-Match": etag}); resp.StatusCode != 204 {
		t.Fatalf("ForceOff: %d", resp.StatusCode)
	}
	if sim.PowerState("") != "Off" {
		t.Fatalf("power %s", sim.PowerState(""))
	}
	// The etag changed with PowerState: the old one is refused.
	resp, doc = c.do("POST", target, map[string]string{"ResetType": "On"}, map[string]string{"If-Match": etag})
	if resp.StatusCode != 412 {
		t.Fatalf("stale If-Match: %d", resp.StatusCode)
	}
	wantError(t, doc, "PreconditionFailed")
	// PATCH: AssetTag is writable, under If-Match; the answer is the
	// updated resource with a new ETag.
	resp, _ = c.do("GET", sysURI, nil, nil)
	etag = resp.Header.Get("ETag")
	resp, doc = c.do("PATCH", sysURI, map[string]string{"AssetTag": "rack 7"}, map[string]string{"If-Match": etag})
	if resp.StatusCode != 200 || doc["AssetTag"] != "rack 7" || resp.Header.Get("ETag") == etag || doc["@odata.etag"] != resp.Header.Get("ETag") {
		t.Fatalf("PATCH AssetTag: %d %v etag %q (was %q)", resp.StatusCode, doc["AssetTag"], resp.Header.Get("ETag"), etag)
	}
	if resp, doc = c.do("PATCH", sysURI, map[string]string{"AssetTag": "rack 8"}, map[string]string{"If-Match": etag}); resp.StatusCode != 412 {
		t.Fatalf("PATCH with a stale ETag: %d", resp.StatusCode)
	}
	wantError(t, doc, "PreconditionFailed")
	if _, doc = c.do("GET", sysURI, nil, nil); doc["AssetTag"] != "rack 7" {
		t.Fatalf("a refused PATCH changed AssetTag to %v", doc["AssetTag"])
	}
	resp, doc = c.do("PATCH", sysURI, map[string]string{"PowerState": "Off"}, nil)
	if resp.StatusCode != 400 || sim.PowerState("") != "Off" {
		t.Fatalf("PATCH PowerState: %d", resp.StatusCode)
	}
	wantError(t, doc, "PropertyNotWritable")
	if resp, _ = c.do("PATCH", "/redfish/v1/Chassis/1U", map[string]string{"AssetTag": "x"}, nil); resp.StatusCode != 405 {
		t.Fatalf("PATCH on a read-only resource: %d", resp.StatusCode)
	}

	ro := &client{t: t, base: c.base}
	ro.login("viewer", "viewpass")
	resp, doc = ro.do("POST", target, map[string]string{"ResetType": "On"}, nil)
	if resp.StatusCode != 403 {
		t.Fatalf("read-only reset: %d", resp.StatusCode)
	}
	wantError(t, doc, "InsufficientPrivilege")
	resp, doc = ro.do("PATCH", sysURI, map[string]string{"AssetTag": "y"}, nil)
	if resp.StatusCode != 403 {
		t.Fatalf("read-only PATCH: %d", resp.StatusCode)
	}
	wantError(t, doc, "InsufficientPrivilege")
}

func TestAsyncResetTaskMonitor(t *testing.T) {
	var hooks []string
	sim, c := start(t, Options{Profile: ProfileOpenBMC, PowerOffDelay: 100 * time.Millisecond,
		OnPowerOff: func(id string) { hooks = append(hooks, "off:"+id) }})
	c.login("admin", "password")
	_, doc := c.do("GET", "/redfish/v1/Systems/system", nil, nil)
	reset := doc["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)
	if _, ok := reset["@Redfish.ActionInfo"]; !ok {
		t.Fatalf("openbmc reset has no ActionInfo: %v", reset)
	}
	resp, doc := c.do("POST", reset["target"].(string), map[string]string{"ResetType": "ForceOff"}, nil)
	mon := resp.Header.Get("Location")
	if resp.StatusCode != 202 || mon == "" || doc["TaskState"] != "Running" {
		t.Fatalf("async reset: %d %q %v", resp.StatusCode, mon, doc)
	}
	if p := sim.PowerState(""); p != "PoweringOff" {
		t.Fatalf("power right after reset: %s, want PoweringOff", p)
	}
	if resp, _ = c.do("GET", mon, nil, nil); resp.StatusCode != 202 {
		t.Fatalf("monitor while running: %d", resp.StatusCode)
	}
	time.Sleep(200 * time.Millisecond)
	resp, doc = c.do("GET", mon, nil, nil)
	if resp.StatusCode != 200 || doc["TaskState"] != "Completed" {
		t.Fatalf("monitor after: %d %v", resp.StatusCode, doc)
	}
	if sim.PowerState("") != "Off" || len(hooks) != 1 || hooks[0] != "off:system" {
		t.Fatalf("power %s hooks %v", sim.PowerState(""), hooks)
	}
}

// Every link in every profile resolves: a trimmed tree that stays consistent.
func TestProfilesLinksResolve(t *testing.T) {
	for _, prof := range Profiles() {
		t.Run(prof, func(t *testing.T) {
			_, c := start(t, Options{Profile: prof})
			if prof == ProfileSushy {
				c.basic = [2]string{"admin", "password"}
			} else {
				c.login("admin", "password")
			}
			seen := map[string]bool{}
			queue := []string{"/redfish/v1/"}
			for len(queue) > 0 {
				p := queue[0]
				queue = queue[1:]
				if seen[p] || strings.Contains(p, "#") {
					continue
				}
				seen[p] = true
				resp, doc := c.do("GET", p, nil, nil)
				if resp.StatusCode != 200 {
					t.Fatalf("GET %s: %d", p, resp.StatusCode)
				}
				collectLinks(doc, &queue)
			}
			if len(seen) < 10 {
				t.Fatalf("only %d resources reachable", len(seen))
			}
		})
	}
}

func collectLinks(v any, out *[]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if s, ok := c.(string); ok && (k == "@odata.id" || k == "@Redfish.ActionInfo") {
				*out = append(*out, s)
			}
			collectLinks(c, out)
		}
	case []any:
		for _, c := range t {
			collectLinks(c, out)
		}
	}
}

func TestFaults(t *testing.T) {
	sim, c := start(t, Options{})
	sim.SetFaults(Faults{ServerErrors: 1})
	resp, doc := c.do("GET", "/redfish/v1/", nil, nil)
	if resp.StatusCode != 503 {
		t.Fatalf("fault 5xx: %d", resp.StatusCode)
	}
	wantError(t, doc, "ServiceTemporarilyUnavailable")
	if resp, _ = c.do("GET", "/redfish/v1/", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("after fault: %d", resp.StatusCode)
	}
	sim.SetFaults(Faults{DropConnections: 1})
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if _, err := fresh.Get(c.base + "/redfish/v1/"); err == nil {
		t.Fatal("dropped connection answered")
	}
	sim.SetFaults(Faults{Latency: 100 * time.Millisecond})
	t0 := time.Now()
	c.do("GET", "/redfish/v1/", nil, nil)
	if time.Since(t0) < 100*time.Millisecond {
		t.Fatal("latency not applied")
	}
	sim.SetFaults(Faults{ResetIgnored: true})
	c.login("admin", "password")
	if resp, _ = c.do("POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil); resp.StatusCode != 204 {
		t.Fatalf("ignored reset: %d", resp.StatusCode)
	}
	if sim.PowerState("") != "On" {
		t.Fatal("ignored reset changed power")
	}
	sim.SetFaults(Faults{ResetAnswersLost: 1})
	req, _ := http.NewRequest("POST", c.base+"/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", strings.NewReader(`{"ResetType":"ForceOff"}`))
	req.Header.Set("X-Auth-Token", c.token)
	if resp, err := fresh.Do(req); err == nil {
		t.Fatalf("lost answer arrived: %d", resp.StatusCode)
	}
	if sim.PowerState("") != "Off" || len(sim.Resets()) != 2 {
		t.Fatalf("the reset whose answer was lost was not carried out: %s, %d resets", sim.PowerState(""), len(sim.Resets()))
	}
}

func TestIDRACConflictAndILOBody(t *testing.T) {
	sim, c := start(t, Options{Profile: ProfileIDRAC, InitialPowerState: "Off"})
	c.login("admin", "password")
	_, doc := c.do("GET", "/redfish/v1/Systems/System.Embedded.1", nil, nil)
	vals := doc["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)["ResetType@Redfish.AllowableValues"].([]any)
	for _, v := range vals {
		if v == "GracefulRestart" {
			t.Fatal("iDRAC profile lists GracefulRestart")
		}
	}
	resp, _ := c.do("POST", "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil)
	if resp.StatusCode != 409 || sim.PowerState("") != "Off" {
		t.Fatalf("iDRAC ForceOff when off: %d", resp.StatusCode)
	}

	_, c2 := start(t, Options{Profile: ProfileILO})
	loc := c2.login("admin", "password")
	if !strings.HasPrefix(loc, "http://") {
		t.Fatalf("iLO session Location %q is not absolute", loc)
	}
	resp, doc = c2.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil)
	if resp.StatusCode != 200 || !strings.Contains(mustJSON(doc), "Base.1.4.Success") {
		t.Fatalf("iLO reset: %d %v", resp.StatusCode, doc)
	}
}

// FuzzHandler: whatever a client sends, the simulator answers (never
// panics), and every error is a Redfish JSON error.
func FuzzHandler(f *testing.F) {
	f.Add("POST", "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"password"}`)
	f.Add("POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", `{"ResetType":"ForceOff"}`)
	f.Add("POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", `{"ResetType":7}`)
	f.Add("GET", "/redfish/v1/TaskService/TaskMonitors/1", "")
	f.Add("DELETE", "/redfish/v1/SessionService/Sessions/x", "null")
	sim, err := New(Options{Profile: ProfileOpenBMC})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, body string) {
		if !validMethod(method) || !strings.HasPrefix(path, "/") {
			return
		}
		req := httptest.NewRequest(http.MethodGet, "/", strings.NewReader(body))
		req.Method = method
		req.URL.Path = path
		req.SetBasicAuth("admin", "password")
		w := httptest.NewRecorder()
		sim.ServeHTTP(w, req)
		if w.Code >= 400 {
			var doc map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc["error"] == nil {
				t.Fatalf("%s %s: %d answer is not a Redfish error: %q", method, path, w.Code, w.Body.String())
			}
		}
	})
}

func validMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "POST", "PATCH", "PUT", "DELETE":
		return true
	}
	return false
}

// ForeignLinks rewrites exactly the links of the kinds asked for, in the
// documents and headers that carry them, and leaves the profile's tree
// alone for later answers.
func TestForeignLinks(t *testing.T) {
	const pre = "@127.0.0.2:17520"
	sim, c := start(t, Options{Profile: ProfileOpenBMC, PowerOffDelay: time.Hour})
	all := map[Link]string{}
	for _, l := range Links() {
		all[l] = pre
	}
	sim.SetFaults(Faults{ForeignLinks: all})
	_, root := c.do("GET", "/redfish/v1/", nil, nil)
	if got := root["Systems"].(map[string]any)["@odata.id"]; got != pre+"/redfish/v1/Systems" {
		t.Fatalf("Systems %v", got)
	}
	if got := root["Links"].(map[string]any)["Sessions"].(map[string]any)["@odata.id"]; got != pre+"/redfish/v1/SessionService/Sessions" {
		t.Fatalf("Links.Sessions %v", got)
	}
	if got := root["Managers"].(map[string]any)["@odata.id"]; got != "/redfish/v1/Managers" {
		t.Fatalf("Managers %v: only the listed kinds change", got)
	}
	if loc := c.login("admin", "password"); !strings.HasPrefix(loc, pre+"/redfish/v1/SessionService/Sessions/") {
		t.Fatalf("session Location %q", loc)
	}
	_, coll := c.do("GET", "/redfish/v1/Systems", nil, nil)
	if got := coll["Members"].([]any)[0].(map[string]any)["@odata.id"]; got != pre+"/redfish/v1/Systems/system" {
		t.Fatalf("member %v", got)
	}
	_, sys := c.do("GET", "/redfish/v1/Systems/system", nil, nil)
	reset := sys["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)
	if sys["@odata.id"] != pre+"/redfish/v1/Systems/system" || reset["target"] != pre+"/redfish/v1/Systems/system/Actions/ComputerSystem.Reset" ||
		reset["@Redfish.ActionInfo"] != pre+"/redfish/v1/Systems/system/ResetActionInfo" {
		t.Fatalf("system %v, reset %v", sys["@odata.id"], reset)
	}
	resp, _ := c.do("POST", "/redfish/v1/Systems/system/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != 202 || loc != pre+"/redfish/v1/TaskService/TaskMonitors/1" {
		t.Fatalf("reset: %d, Location %q", resp.StatusCode, loc)
	}
	if resp, _ := c.do("GET", "/redfish/v1/TaskService/TaskMonitors/1", nil, nil); resp.Header.Get("Location") != pre+"/redfish/v1/TaskService/TaskMonitors/1" {
		t.Fatalf("running monitor: Location %q", resp.Header.Get("Location"))
	}

	sim.SetFaults(Faults{})
	_, sys = c.do("GET", "/redfish/v1/Systems/system", nil, nil)
	if sys["@odata.id"] != "/redfish/v1/Systems/system" {
		t.Fatalf("fault cleared, system still %v", sys["@odata.id"])
	}
}

// The sushy profile has no session service at all: the service root names
// none, a login POST and the SessionService answer 404, Basic auth works,
// and errors carry their message only in error.message.
func TestSushyProfile(t *testing.T) {
	sim, c := start(t, Options{Profile: ProfileSushy})
	_, root := c.do("GET", "/redfish/v1/", nil, nil)
	if _, ok := root["SessionService"]; ok {
		t.Fatalf("service root names a SessionService: %v", root)
	}
	if _, ok := root["Links"]; ok {
		t.Fatalf("service root has Links: %v", root)
	}
	resp, doc := c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": "admin", "Password": "password"}, nil)
	if resp.StatusCode != 404 || resp.Header.Get("X-Auth-Token") != "" {
		t.Fatalf("login on a BMC without sessions: %d %v", resp.StatusCode, doc)
	}
	resp, doc = c.do("GET", "/redfish/v1/Systems", nil, nil)
	e, _ := doc["error"].(map[string]any)
	if resp.StatusCode != 401 || e["code"] != "Base.1.0.GeneralError" || e["message"] != "Incorrect username or password" {
		t.Fatalf("unauthenticated: %d %v", resp.StatusCode, doc)
	}
	if info := e["@Message.ExtendedInfo"].([]any)[0].(map[string]any); info["MessageId"] != "Base.1.0.GeneralError" || info["Message"] != nil {
		t.Fatalf("ExtendedInfo %v", info)
	}
	c.basic = [2]string{"admin", "password"}
	if resp, _ = c.do("GET", "/redfish/v1/SessionService", nil, nil); resp.StatusCode != 404 {
		t.Fatalf("SessionService: %d", resp.StatusCode)
	}
	uri := sim.SystemURIs()[0]
	if resp, _ = c.do("POST", uri+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil); resp.StatusCode != 204 {
		t.Fatalf("reset with Basic: %d", resp.StatusCode)
	}
	if sim.PowerState("") != "Off" {
		t.Fatalf("power %s", sim.PowerState(""))
	}
}

// slow-off reads PoweringOff for its delay (5s unless set) before Off.
func TestSlowOffProfile(t *testing.T) {
	if d := ProfilePowerOffDelay(ProfileSlowOff); d != SlowOffDelay {
		t.Fatalf("slow-off default delay %v", d)
	}
	sim, c := start(t, Options{Profile: ProfileSlowOff, PowerOffDelay: 300 * time.Millisecond})
	c.login("admin", "password")
	if resp, _ := c.do("POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil); resp.StatusCode != 204 {
		t.Fatalf("reset: %d", resp.StatusCode)
	}
	time.Sleep(150 * time.Millisecond)
	if p := sim.PowerState(""); p != "PoweringOff" {
		t.Fatalf("halfway: %s", p)
	}
	time.Sleep(300 * time.Millisecond)
	if p := sim.PowerState(""); p != "Off" {
		t.Fatalf("after the delay: %s", p)
	}
}

// push-button allows PushPowerButton only, and a press toggles.
func TestPushButtonProfile(t *testing.T) {
	sim, c := start(t, Options{Profile: ProfilePushButton})
	c.login("admin", "password")
	sys := "/redfish/v1/Systems/437XR1138R2"
	_, doc := c.do("GET", sys, nil, nil)
	allowed := doc["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)["ResetType@Redfish.AllowableValues"]
	if mustJSON(allowed) != `["PushPowerButton"]` {
		t.Fatalf("allowed %v", allowed)
	}
	resp, doc := c.do("POST", sys+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("ForceOff: %d", resp.StatusCode)
	}
	wantError(t, doc, "ActionParameterValueNotInList")
	for _, want := range []string{"Off", "On", "Off"} {
		if resp, _ := c.do("POST", sys+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "PushPowerButton"}, nil); resp.StatusCode != 204 {
			t.Fatalf("press: %d", resp.StatusCode)
		}
		if p := sim.PowerState(""); p != want {
			t.Fatalf("after a press: %s, want %s", p, want)
		}
	}
}

// session-limit refuses the third login with 503 SessionLimitExceeded
// until a slot is freed.
func TestSessionLimitProfile(t *testing.T) {
	sim, c := start(t, Options{Profile: ProfileSessionLimit})
	first := c.login("admin", "password")
	c.login("admin", "password")
	resp, doc := c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": "admin", "Password": "password"}, nil)
	if resp.StatusCode != 503 || resp.Header.Get("X-Auth-Token") != "" {
		t.Fatalf("third login: %d %v", resp.StatusCode, doc)
	}
	wantError(t, doc, "SessionLimitExceeded")
	if sim.OpenSessions() != 2 || sim.LoginsRefused() != 1 {
		t.Fatalf("open %d refused %d", sim.OpenSessions(), sim.LoginsRefused())
	}
	if resp, _ = c.do("DELETE", first, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	c.login("admin", "password")

	// Any profile takes a limit; negative is none.
	_, c = start(t, Options{SessionLimit: 1})
	c.login("admin", "password")
	if resp, _ = c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": "admin", "Password": "password"}, nil); resp.StatusCode != 503 {
		t.Fatalf("second login with a limit of 1: %d", resp.StatusCode)
	}
	_, c = start(t, Options{Profile: ProfileSessionLimit, SessionLimit: -1})
	for range 5 {
		c.login("admin", "password")
	}
}

// slow-task: the power changes at once, the task reads Running for
// TaskDelay.
func TestSlowTaskProfile(t *testing.T) {
	sim, c := start(t, Options{Profile: ProfileSlowTask, TaskDelay: 400 * time.Millisecond})
	c.login("admin", "password")
	resp, doc := c.do("POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil)
	mon := resp.Header.Get("Location")
	if resp.StatusCode != 202 || mon == "" || doc["TaskState"] != "Running" {
		t.Fatalf("reset: %d %q %v", resp.StatusCode, mon, doc)
	}
	if p := sim.PowerState(""); p != "Off" {
		t.Fatalf("power right after the reset: %s", p)
	}
	if resp, doc = c.do("GET", mon, nil, nil); resp.StatusCode != 202 || doc["TaskState"] != "Running" {
		t.Fatalf("monitor while the task runs: %d %v", resp.StatusCode, doc)
	}
	time.Sleep(500 * time.Millisecond)
	if resp, doc = c.do("GET", mon, nil, nil); resp.StatusCode != 200 || doc["TaskState"] != "Completed" {
		t.Fatalf("monitor after TaskDelay: %d %v", resp.StatusCode, doc)
	}
	// The default is 30 seconds: still running after a moment.
	_, c = start(t, Options{Profile: ProfileSlowTask})
	c.login("admin", "password")
	resp, _ = c.do("POST", "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}, nil)
	time.Sleep(100 * time.Millisecond)
	if resp, doc = c.do("GET", resp.Header.Get("Location"), nil, nil); doc["TaskState"] != "Running" {
		t.Fatalf("default task after 100ms: %d %v", resp.StatusCode, doc)
	}
}

// LoginRefused answers logins with the status given, on any profile.
func TestLoginRefused(t *testing.T) {
	for _, code := range []int{404, 405, 501, 503} {
		sim, c := start(t, Options{})
		sim.SetFaults(Faults{LoginRefused: code})
		resp, doc := c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": "admin", "Password": "password"}, nil)
		if resp.StatusCode != code || doc["error"] == nil || sim.SessionsCreated() != 0 {
			t.Fatalf("LoginRefused %d: %d %v", code, resp.StatusCode, doc)
		}
	}
}
