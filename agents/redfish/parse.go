package redfish

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// systemInfo is what fencing needs from a ComputerSystem. Its links
// (resetTarget, actionInfo) are as the BMC gave them, not yet resolved.
type systemInfo struct {
	// uri is where the system was read: its read-back is read there too,
	// never at the document's own @odata.id.
	uri, id, name string
	power         schemas.PowerState
	etag          string
	resetTarget   string
	// allowed lists the ResetType values the action annotates; nil when the
	// action does not annotate them (see actionInfo).
	allowed    []string
	actionInfo string
}

// parseSystem decodes a ComputerSystem with gofish's schema, plus the Reset
// action's target and annotations (which gofish keeps private).
func parseSystem(body []byte, etagHeader string) (*systemInfo, error) {
	var cs schemas.ComputerSystem
	if err := json.Unmarshal(body, &cs); err != nil {
		return nil, fmt.Errorf("decoding ComputerSystem: %w", err)
	}
	var raw struct {
		Actions struct {
			Reset struct {
				Target     string          `json:"target"`
				Allowed    json.RawMessage `json:"ResetType@Redfish.AllowableValues"`
				ActionInfo string          `json:"@Redfish.ActionInfo"`
			} `json:"#ComputerSystem.Reset"`
		}
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("decoding ComputerSystem actions: %w", err)
	}
	si := &systemInfo{
		id:          cs.ID,
		name:        cs.Name,
		power:       cs.PowerState,
		etag:        cs.ODataEtag,
		resetTarget: raw.Actions.Reset.Target,
		actionInfo:  raw.Actions.Reset.ActionInfo,
	}
	if si.etag == "" {
		si.etag = etagHeader
	}
	if len(raw.Actions.Reset.Allowed) > 0 && string(raw.Actions.Reset.Allowed) != "null" {
		var vals []string
		if err := json.Unmarshal(raw.Actions.Reset.Allowed, &vals); err != nil {
			return nil, fmt.Errorf("decoding ResetType@Redfish.AllowableValues: %w", err)
		}
		si.allowed = vals
		if si.allowed == nil {
			si.allowed = []string{}
		}
	}
	return si, nil
}

// parseActionInfo returns the ResetType values an ActionInfo allows.
func parseActionInfo(body []byte) ([]string, error) {
	var ai schemas.ActionInfo
	if err := json.Unmarshal(body, &ai); err != nil {
		return nil, fmt.Errorf("decoding ActionInfo: %w", err)
	}
	vals, err := ai.GetParamValues("ResetType", schemas.StringParameterTypes)
	if err != nil {
		return nil, errors.New("ActionInfo has no ResetType parameter")
	}
	if vals == nil {
		vals = []string{}
	}
	return vals, nil
}

// parseMembers returns the member links of a collection, unresolved.
func parseMembers(body []byte) ([]string, error) {
	var coll struct {
		Members []struct {
			ID string `json:"@odata.id"`
		}
	}
	if err := json.Unmarshal(body, &coll); err != nil {
		return nil, fmt.Errorf("decoding collection: %w", err)
	}
	var out []string
	for _, m := range coll.Members {
		if m.ID != "" {
			out = append(out, m.ID)
		}
	}
	return out, nil
}

// serviceRootDoc is what the agent reads of the service root: its links,
// unresolved; "" for one it lacks.
type serviceRootDoc struct {
	systems, sessions, sessionService string
}

func parseServiceRoot(body []byte) (serviceRootDoc, error) {
	type link struct {
		ID string `json:"@odata.id"`
	}
	var root struct {
		Systems        link
		SessionService link
		Links          struct {
			Sessions link
		}
	}
	if err := json.Unmarshal(body, &root); err != nil {
		return serviceRootDoc{}, fmt.Errorf("decoding service root: %w", err)
	}
	return serviceRootDoc{systems: root.Systems.ID, sessions: root.Links.Sessions.ID, sessionService: root.SessionService.ID}, nil
}

// taskOutcome reads a finished task monitor's answer: done reports the task
// is over; err says how it failed, in the task's messages cleaned of
// secrets. An empty body means done (204-style).
func taskOutcome(body []byte, secrets []string) (done bool, err error) {
	if len(body) == 0 {
		return true, nil
	}
	var t schemas.Task
	if jerr := json.Unmarshal(body, &t); jerr != nil {
		return false, fmt.Errorf("decoding Task: %w", jerr)
	}
	switch t.TaskState {
	case schemas.CompletedTaskState:
		if t.TaskStatus == schemas.CriticalHealth {
			return true, fmt.Errorf("task %s completed with status Critical%s", clean(t.ID, maxMessagePart, secrets), taskMessages(&t, secrets))
		}
		return true, nil
	case schemas.ExceptionTaskState, schemas.KilledTaskState, schemas.CancelledTaskState:
		return true, fmt.Errorf("task %s ended %s%s", clean(t.ID, maxMessagePart, secrets), t.TaskState, taskMessages(&t, secrets))
	case "":
		// Not a Task: the operation's own response; the read-back decides.
		return true, nil
	}
	return false, nil
}

// taskMessages lists a task's messages with their IDs, cleaned like an
// error's.
func taskMessages(t *schemas.Task, secrets []string) string {
	var parts []string
	for _, m := range t.Messages {
		id, msg := clean(m.MessageID, maxMessagePart, secrets), clean(m.Message, maxMessagePart, secrets)
		switch {
		case id != "" && msg != "":
			parts = append(parts, id+": "+msg)
		case msg != "":
			parts = append(parts, msg)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + bound(strings.Join(parts, "; "), maxMessage)
}
