package daemon

import (
	"encoding/json"
)

const fwdContact = "contact" // "how long since you heard from leader X?"

type contactReq struct {
	Leader string `json:"leader"`
}

type contactResp struct {
	Known     bool  `json:"known"`
	ElapsedNs int64 `json:"elapsedNs"`
}

func (d *Daemon) answerContact(body []byte) ([]byte, error) {
	var req contactReq
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	e, ok := d.raft.BoundContact(req.Leader)
	return json.Marshal(contactResp{Known: ok, ElapsedNs: int64(e)})
}
