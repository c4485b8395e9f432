package gradio

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// ErrBadInput: the app refused a join because of what the call carried
// (HTTP 400, 404, 405, 413 and the like: a missing or malformed field, a
// validator's message). It is wrapped by a *ProtocolError with the status.
// The call was not accepted, and it would be refused by any replica of the
// same app.
var ErrBadInput = errors.New("gradio: the app refused the call's input")

// JoinOutcome is what the answer to a join proves about the call: the one
// rule deciding whether a call may run elsewhere, shared by this client,
// package pool and the gateway's Gradio front door.
type JoinOutcome int

const (
	// JoinAccepted: the app queued the call (it answered an event id).
	JoinAccepted JoinOutcome = iota + 1
	// JoinNotAccepted: the app provably did not queue the call: it was
	// never sent, or the replica refused it (a 5xx other than 504, a full
	// queue, an app that changed or is not running). Another replica may
	// run it without running it twice.
	JoinNotAccepted
	// JoinMaybeAccepted: the app may have queued the call (a join sent and
	// not answered, a proxy's 504, an answer that is not Gradio's): it must
	// never run again.
	JoinMaybeAccepted
	// JoinCallerFault: the app refused the call for what it carries: an
	// unknown fn_index or api_name, bad arguments, a file too large, a 4xx,
	// or credentials or a quota (401, 403, 429) that every replica would
	// refuse alike. It was not accepted, moving it cannot help, and it says
	// nothing about the replica's health: it goes back to the caller.
	JoinCallerFault
)

func (o JoinOutcome) String() string {
	switch o {
	case JoinAccepted:
		return "accepted"
	case JoinNotAccepted:
		return "not accepted"
	case JoinMaybeAccepted:
		return "maybe accepted"
	case JoinCallerFault:
		return "caller's fault"
	}
	return fmt.Sprintf("JoinOutcome(%d)", int(o))
}

// ClassifyJoin says what err, returned by Client.Submit or Predict or by
// [JoinAnswer], proves about the call. nil is JoinAccepted; an error this
// package does not know is JoinMaybeAccepted (never run twice).
func ClassifyJoin(err error) JoinOutcome {
	var (
		lost  *ConnectionLostError
		arg   *ArgumentError
		big   *UploadTooLargeError
		conn  *ConnectError
		proto *ProtocolError
		meta  *MetadataError
		space *SpaceError
	)
	switch {
	case err == nil:
		return JoinAccepted
	case errors.Is(err, ErrMaybeAccepted):
		return JoinMaybeAccepted
	case errors.As(err, &lost):
		switch {
		case lost.Accepted:
			return JoinAccepted
		case lost.MaybeAccepted:
			return JoinMaybeAccepted
		}
		return JoinNotAccepted
	case errors.Is(err, ErrUnknownEndpoint), errors.Is(err, ErrBadInput),
		errors.As(err, &arg), errors.As(err, &big):
		return JoinCallerFault
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrAppChanged), errors.Is(err, ErrClosed),
		errors.As(err, &conn), errors.As(err, &space), errors.As(err, &meta):
		// A connect that failed (a 401 or 429 on the config included):
		// the call never reached the app, and that replica is at fault.
		return JoinNotAccepted
	case errors.As(err, &proto):
		switch s := proto.StatusCode; {
		case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrRateLimited):
			return JoinCallerFault
		case s >= 500 && s != http.StatusGatewayTimeout:
			// A 5xx answer to queue/join (or to an upload before it): the
			// app refused the call. 504 is excluded: a proxy's time-out
			// may come after the app queued it.
			return JoinNotAccepted
		case s >= 400 && s < 500 && s != http.StatusRequestTimeout:
			return JoinCallerFault
		}
	}
	// Unknown errors, and the caller's context ending (Submit returns it
	// also after a join the app accepted): never run twice.
	return JoinMaybeAccepted
}

// JoinAnswer turns an HTTP answer to queue/join into the event id, or into
// the error Submit returns for it (classify it with [ClassifyJoin]). fnKnown
// says whether the joined fn_index is one of the app's dependencies, as its
// config lists them: real Gradio answers a join of an unknown fn_index with
// HTTP 500 (a KeyError while looking the function up; plain "Internal Server
// Error" from 4.x and 6.9 on, the Python traceback from 5.0 to 6.8), which
// cannot be told from a replica failing by the answer alone.
func JoinAnswer(status int, body []byte, fnKnown bool) (eventID string, err error) {
	switch {
	case status == http.StatusOK:
		var v struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(body, &v); err != nil || v.EventID == "" {
			return "", &ProtocolError{Op: "queue/join", Body: excerpt(body), Err: errors.New("no event_id")}
		}
		return v.EventID, nil
	case status == http.StatusServiceUnavailable:
		return "", joinUnavailable("queue/join", body)
	case status == http.StatusTooManyRequests:
		return "", &ProtocolError{Op: "queue/join", StatusCode: status, Body: excerpt(body), Err: ErrRateLimited}
	case status == http.StatusUnprocessableEntity:
		return "", &ArgumentError{Endpoint: "queue/join", Msg: "the app rejected the arguments: " + detail(body)}
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return "", &ProtocolError{Op: "queue/join", StatusCode: status, Body: excerpt(body), Err: ErrUnauthorized}
	case status == http.StatusInternalServerError && !fnKnown:
		return "", &ProtocolError{Op: "queue/join", StatusCode: status, Body: excerpt(body), Err: ErrUnknownEndpoint}
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout:
		return "", &ProtocolError{Op: "queue/join", StatusCode: status, Body: excerpt(body), Err: ErrBadInput}
	}
	return "", &ProtocolError{Op: "queue/join", StatusCode: status, Body: excerpt(body)}
}

// HasFn reports whether fnIndex is one of the config's dependencies,
// callable or not (a browser joins private ones too).
func (c *Config) HasFn(fnIndex int) bool {
	for k := range c.Dependencies {
		if c.Dependencies[k].FnIndex == fnIndex {
			return true
		}
	}
	return false
}
