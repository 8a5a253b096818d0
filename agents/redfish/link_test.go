package redfish

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stmcginnis/gofish"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/redfish/redfishsim"
)

// Links are resolved against the BMC's base URL and accepted only when
// they stay on its scheme, host and port; absolute URLs that name the BMC
// itself (as iLO's session Location does) keep working.
func TestResolveLink(t *testing.T) {
	o, err := newOrigin("https://bmc.example:443")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		link, from, want string // want "" means refused
	}{
		{"/redfish/v1/Systems/1", "/redfish/v1/Systems", "/redfish/v1/Systems/1"},
		{"/redfish/v1/Systems/1/", "", "/redfish/v1/Systems/1/"},
		{"https://bmc.example/redfish/v1/Systems/1", "", "/redfish/v1/Systems/1"},
		{"HTTPS://BMC.example:443/redfish/v1/Systems/1", "", "/redfish/v1/Systems/1"},
		{"//bmc.example:443/redfish/v1/TaskService/TaskMonitors/1?x=1#frag", "", "/redfish/v1/TaskService/TaskMonitors/1?x=1"},
		{"Systems/1", "/redfish/v1/", "/redfish/v1/Systems/1"},
		{"1", "/redfish/v1/Systems/", "/redfish/v1/Systems/1"},
		{"/redfish/v1/Systems/../../../x", "", "/x"}, // still the BMC
		{"/redfish/v1/Systems/a%2Fb", "", "/redfish/v1/Systems/a%2Fb"},
		{"https://bmc.example", "", "/"},

		{"@bmc2.example:443/redfish/v1/Systems/1", "", ""},
		{"//bmc2.example/redfish/v1/Systems/1", "", ""},
		{"https://bmc2.example/redfish/v1/Systems/1", "", ""},
		{"https://bmc.example:8443/redfish/v1/Systems/1", "", ""},
		{"http://bmc.example:443/redfish/v1/Systems/1", "", ""},
		{"https://user@bmc.example/redfish/v1/Systems/1", "", ""},
		{"https://bmc.example@bmc2.example/redfish/v1/Systems/1", "", ""},
		{"https://[::1]/redfish/v1/Systems/1", "", ""},
		{"mailto:root@bmc.example", "", ""},
		{"https:bmc.example/x", "", ""},
		{"/redfish/v1/Systems/1\r\nX-Evil: 1", "", ""},
		{"", "", ""},
	} {
		got, err := o.resolve(linkMember, tc.link, tc.from)
		if tc.want == "" {
			var le *linkError
			if err == nil || !errors.As(err, &le) || !strings.Contains(err.Error(), linkMember) {
				t.Errorf("resolve(%q) = %q, %v; want refused naming the link", tc.link, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("resolve(%q, from %q) = %q, %v; want %q", tc.link, tc.from, got, err, tc.want)
		}
	}

	// IPv6 BMCs and plain HTTP on a default port.
	o6, err := newOrigin("http://[fe80::1]:80")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := o6.resolve(linkReset, "http://[FE80::1]/x", ""); err != nil || got != "/x" {
		t.Errorf("IPv6 self link: %q %v", got, err)
	}
	if _, err := newOrigin("https://evil@bmc:443"); err == nil {
		t.Error("base URL with userinfo accepted")
	}
}

// The second wall: whatever a link check upstream misses, the agent's HTTP
// client sends nothing to another host — not for gofish either, which joins
// a link onto the base URL as text — and says so as a failure, not a
// transient error to retry.
func TestTransportGuard(t *testing.T) {
	at := startAttacker(t, redfishsim.ProfileDMTF)
	srv := startSim(t, false, redfishsim.Options{})
	a := newAgent(t, simParams(t, srv, agents.Params{"basic_auth": "1"}))
	ctx := ctxT(t)

	c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{Endpoint: a.cfg.endpoint, HTTPClient: a.http,
		NoModifyTransport: true, Username: "root", Password: secret, BasicAuth: true})
	if err != nil {
		t.Fatalf("gofish over the guarded client, to the BMC: %v", err)
	}
	for _, link := range []string{"@" + at.addr + "/redfish/v1/Systems", "@" + at.addr + "/redfish/v1/SessionService/Sessions"} {
		resp, err := c.WithContext(ctx).Get(link)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("gofish GET %q went through", link)
		}
		var re *refusedError
		if !errors.As(err, &re) || transient(ctx, err) || maybeDelivered(err) {
			t.Fatalf("GET %q: %v (refused=%v transient=%v)", link, err, errors.As(err, &re), transient(ctx, err))
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatal("password in the error")
		}
		t.Logf("gofish GET %q: %v", link, err)
	}
	for _, u := range []string{"http://" + at.addr + "/redfish/v1/", "http://root:" + secret + "@" + srv.Addr + "/redfish/v1/", "https://" + srv.Addr + "/redfish/v1/"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"Password":"`+secret+`"}`))
		resp, err := a.http.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("POST %s went through", u)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("password in the error: %v", err)
		}
		if !refused(err) {
			t.Fatalf("POST %s: %v, want refused", u, err)
		}
	}
	at.wantNothing(t)
	if n := srv.Requests(); n != 1 {
		t.Fatalf("the BMC served %d requests, want 1 (gofish's service root)", n)
	}
}
