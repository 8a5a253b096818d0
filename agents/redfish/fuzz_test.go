package redfish

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/stmcginnis/gofish/schemas"
)

// FuzzParse feeds arbitrary bytes to every decoder of BMC answers: they may
// refuse, never panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"On","Actions":{"#ComputerSystem.Reset":{"target":"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset","ResetType@Redfish.AllowableValues":["On","ForceOff"]}}}`))
	f.Add([]byte(`{"Actions":{"#ComputerSystem.Reset":{"target":"https://h/x","@Redfish.ActionInfo":"/ai","ResetType@Redfish.AllowableValues":[1,2]}}}`))
	f.Add([]byte(`{"Parameters":[{"Name":"ResetType","DataType":"String","AllowableValues":["ForceOff"]}]}`))
	f.Add([]byte(`{"TaskState":"Exception","TaskStatus":"Critical","Messages":[{"Message":"boom"}]}`))
	f.Add([]byte(`{"Members":[{"@odata.id":"/redfish/v1/Systems/1"},{}],"Systems":{"@odata.id":"/redfish/v1/Systems"}}`))
	f.Add([]byte(`{"error":{"code":"Base.1.8.GeneralError","message":"m","@Message.ExtendedInfo":[{"MessageId":"x","Message":"y"}]}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`@127.0.0.2:17520/redfish/v1/Systems/1`))
	f.Add([]byte(`//127.0.0.2:17520/redfish/v1/Systems/1`))
	f.Add([]byte(`https://bmc.example:443/redfish/v1/Systems/1?x=1#f`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if si, err := parseSystem(b, `"e"`); err == nil {
			_, _ = stateOf(si.power)
			_, _ = chooseReset(schemas.OffPowerState, si.allowed)
		}
		_, _ = parseActionInfo(b)
		_, _ = parseMembers(b)
		_, _ = parseServiceRoot(b)
		_, _ = taskOutcome(b, []string{"pw"})
		err := fromGofish(schemas.ConstructError(500, b))
		var he *httpError
		if !errors.As(err, &he) || he.Status != 500 {
			t.Fatalf("error not classified: %v", err)
		}
		if len(he.Error()) > 400 {
			t.Fatalf("error summary too long: %d", len(he.Error()))
		}
		// Whatever the link, a resolved one names the BMC.
		if p, err := fuzzOrigin.resolve(linkMember, string(b), "/redfish/v1/Systems"); err == nil {
			u, perr := url.Parse(fuzzOrigin.base.String() + strings.TrimPrefix(p, "/"))
			if perr != nil || fuzzOrigin.foreign(u) != "" || !strings.HasPrefix(p, "/") {
				t.Fatalf("link %q resolved to %q, off the BMC (%v)", b, p, perr)
			}
		}
	})
}

var fuzzOrigin = func() *origin {
	o, err := newOrigin("https://bmc.example:443")
	if err != nil {
		panic(err)
	}
	return o
}()

func TestParseSystem(t *testing.T) {
	si, err := parseSystem([]byte(`{"@odata.id":"/redfish/v1/Systems/1/","Id":"1","PowerState":"PoweringOff",
		"Actions":{"#ComputerSystem.Reset":{"target":"https://10.0.0.1/redfish/v1/Systems/1/Actions/ComputerSystem.Reset","@Redfish.ActionInfo":"/redfish/v1/Systems/1/ResetActionInfo"}}}`), `"abc"`)
	if err != nil {
		t.Fatal(err)
	}
	if si.uri != "" || si.etag != `"abc"` || si.allowed != nil ||
		si.resetTarget != "https://10.0.0.1/redfish/v1/Systems/1/Actions/ComputerSystem.Reset" || si.actionInfo != "/redfish/v1/Systems/1/ResetActionInfo" {
		t.Fatalf("%+v", si)
	}
	if _, err := parseSystem([]byte(`{"Actions":{"#ComputerSystem.Reset":{"ResetType@Redfish.AllowableValues":[1]}}}`), ""); err == nil {
		t.Fatal("numeric ResetType accepted")
	}
	for _, tc := range []struct {
		allowed []string
		want    string
		ok      bool
	}{
		{nil, "ForceOff", true},
		{[]string{"On", "ForceOff"}, "ForceOff", true},
		{[]string{"On", "PushPowerButton", "GracefulShutdown"}, "PushPowerButton", true},
		{[]string{"ForceOff", "PushPowerButton"}, "ForceOff", true},
		{[]string{"On", "GracefulShutdown", "GracefulRestart"}, "", false},
		{[]string{}, "", false},
	} {
		got, err := chooseReset(schemas.OffPowerState, tc.allowed)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("chooseReset(off, %v) = %q, %v", tc.allowed, got, err)
		}
	}
	if got, _ := chooseReset(schemas.OnPowerState, []string{"ForceOn", "ForceOff"}); got != "ForceOn" {
		t.Errorf("on with only ForceOn: %q", got)
	}
	done, err := taskOutcome(nil, nil)
	if !done || err != nil {
		t.Fatalf("empty task answer: %v %v", done, err)
	}
	done, err = taskOutcome([]byte(`{"Id":"7","TaskState":"Exception","Messages":[{"Message":"power supply fault"}]}`), nil)
	if !done || err == nil || !json.Valid([]byte(`{}`)) {
		t.Fatalf("exception task: %v %v", done, err)
	}
}
