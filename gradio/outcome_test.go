package gradio_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// TestJoinAnswerRecorded: every answer real Gradio gives to a bad join
// (testdata/joins) is classified as recorded: an unknown fn_index or api
// name (500, a traceback or "Internal Server Error") and 4xx answers are the
// caller's fault; too few arguments is accepted (it fails later).
func TestJoinAnswerRecorded(t *testing.T) {
	b, err := os.ReadFile("testdata/joins/bad_joins.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Cases []struct {
			Name    string `json:"name"`
			Answers map[string]struct {
				Status int    `json:"status"`
				Body   string `json:"body"`
			} `json:"answers"`
			Outcome string `json:"outcome"`
			FnKnown bool   `json:"fn_known"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range rec.Cases {
		for v, a := range c.Answers {
			body := a.Body
			if a.Status == 200 {
				body = `{"event_id":"0123456789abcdef0123456789abcdef"}`
			}
			_, err := gradio.JoinAnswer(a.Status, []byte(body), c.FnKnown)
			if got := gradio.ClassifyJoin(err).String(); got != c.Outcome {
				t.Errorf("%s on %s: %s (%v), want %s", c.Name, v, got, err, c.Outcome)
			}
			n++
		}
	}
	if n < 12 {
		t.Fatalf("only %d recorded answers", n)
	}
}

// TestJoinAnswer: what each answer to a join proves, with the fn_index
// known to the app's config or not.
func TestJoinAnswer(t *testing.T) {
	for _, tc := range []struct {
		status  int
		body    string
		fnKnown bool
		want    gradio.JoinOutcome
		is      error
	}{
		{200, `{"event_id":"abc"}`, true, gradio.JoinAccepted, nil},
		{200, `{}`, true, gradio.JoinMaybeAccepted, nil},
		{500, "Internal Server Error", true, gradio.JoinNotAccepted, nil}, // a replica failing
		{500, "Internal Server Error", false, gradio.JoinCallerFault, gradio.ErrUnknownEndpoint},
		{502, "Bad Gateway", false, gradio.JoinNotAccepted, nil},
		{503, `{"detail":"Queue is full. Max size is 1 and size is 1."}`, true, gradio.JoinNotAccepted, gradio.ErrQueueFull},
		{503, `<html>sleeping</html>`, true, gradio.JoinNotAccepted, nil},
		{504, "Gateway Timeout", true, gradio.JoinMaybeAccepted, nil},
		{400, `{"detail":"No function index provided."}`, false, gradio.JoinCallerFault, gradio.ErrBadInput},
		{404, `Not Found`, true, gradio.JoinCallerFault, gradio.ErrBadInput},
		{408, `Request Timeout`, true, gradio.JoinMaybeAccepted, nil},
		{413, `too large`, true, gradio.JoinCallerFault, gradio.ErrBadInput},
		{422, `{"detail":[{"type":"int_parsing"}]}`, false, gradio.JoinCallerFault, nil},
		{401, `{"detail":"Not authenticated"}`, true, gradio.JoinCallerFault, gradio.ErrUnauthorized},
		{429, `Too Many Requests`, true, gradio.JoinCallerFault, gradio.ErrRateLimited},
	} {
		t.Run(fmt.Sprintf("%d_%v", tc.status, tc.fnKnown), func(t *testing.T) {
			_, err := gradio.JoinAnswer(tc.status, []byte(tc.body), tc.fnKnown)
			if got := gradio.ClassifyJoin(err); got != tc.want {
				t.Errorf("%v: %s, want %s", err, got, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
		})
	}
}

// TestClassifyJoin: the outcome of the errors Submit returns.
func TestClassifyJoin(t *testing.T) {
	refused := &gradio.ProtocolError{Op: "queue/join", StatusCode: 502}
	for _, tc := range []struct {
		name string
		err  error
		want gradio.JoinOutcome
	}{
		{"nil", nil, gradio.JoinAccepted},
		{"connect failure", &gradio.ConnectError{Src: "x", Err: errors.New("refused")}, gradio.JoinNotAccepted},
		{"5xx on join", refused, gradio.JoinNotAccepted},
		{"504 on join may have been queued", &gradio.ProtocolError{Op: "queue/join", StatusCode: 504}, gradio.JoinMaybeAccepted},
		{"app queue full", gradio.ErrQueueFull, gradio.JoinNotAccepted},
		{"lost after acceptance", &gradio.ConnectionLostError{Accepted: true, Err: errors.New("cut")}, gradio.JoinAccepted},
		{"maybe accepted", &gradio.ConnectionLostError{MaybeAccepted: true, Err: errors.New("stalled")}, gradio.JoinMaybeAccepted},
		{"ctx ended during the join", fmt.Errorf("%w: %w", gradio.ErrMaybeAccepted, errors.New("deadline")), gradio.JoinMaybeAccepted},
		{"lost before sending", &gradio.ConnectionLostError{Err: errors.New("cut")}, gradio.JoinNotAccepted},
		{"app error", &gradio.AppError{Message: "boom"}, gradio.JoinMaybeAccepted},
		{"unknown endpoint", fmt.Errorf("%w: /nope", gradio.ErrUnknownEndpoint), gradio.JoinCallerFault},
		{"bad arguments", &gradio.ArgumentError{Endpoint: "/upper", Msg: "want 1"}, gradio.JoinCallerFault},
		{"file too large", &gradio.UploadTooLargeError{Name: "f", Size: 10, Max: 1}, gradio.JoinCallerFault},
		{"config 401 at connect: the replica's", &gradio.MetadataError{Op: "config", StatusCode: 401, Err: gradio.ErrUnauthorized}, gradio.JoinNotAccepted},
		{"space asleep", &gradio.SpaceError{Space: "a/b", Stage: "PAUSED"}, gradio.JoinNotAccepted},
		{"app changed", gradio.ErrAppChanged, gradio.JoinNotAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gradio.ClassifyJoin(tc.err); got != tc.want {
				t.Errorf("%s, want %s", got, tc.want)
			}
		})
	}
}
