package api

// Error is the body of every answer that is not 2xx, and what
// `fencectl -o json` prints on stderr when a command fails.
type Error struct {
	SchemaVersion int    `json:"schemaVersion"`
	Message       string `json:"error"`
	// Code says what kind of failure it is, one of the Code constants.
	Code string `json:"code"`
	// ExitCode is fencectl's exit status for the failure (fencectl only).
	ExitCode int `json:"exitCode,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Error codes. The API answers 400 with CodeBadRequest or CodeRefused,
// 404 with CodeNotFound, 408 with CodeTimeout, 413 with CodeTooLarge, and
// 503 with CodeFailed; fencectl adds its own for what happens before or
// instead of an answer.
const (
	CodeBadRequest = "bad-request" // the request itself is malformed
	CodeRefused    = "refused"     // well-formed, but the cluster will not do it (unknown node, already primary, ...)
	CodeNotFound   = "not-found"   // no such device or route
	CodeTimeout    = "timeout"     // the request's body did not arrive in time
	CodeTooLarge   = "too-large"   // the request's body is over MaxRequestBody
	CodeFailed     = "failed"      // tried and failed, or the cluster cannot answer now (no leader, commit failed)

	CodeUsage            = "usage"             // fencectl: bad command line
	CodeNotRunning       = "not-running"       // fencectl: nothing answers on the socket
	CodePermissionDenied = "permission-denied" // fencectl: the socket may not be opened by this user
	CodeNotConfirmed     = "not-confirmed"     // fencectl: a destructive command lacks --yes
	CodeNoAnswer         = "no-answer"         // fencectl: no answer within --timeout, or interrupted
)
