package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/gradiopool/gradiopool/gradio"
)

// apiError is an error as the gateway answers it:
// {"error":{"code":"...","message":"...","title":"..."}}.
type apiError struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	Title      string `json:"title,omitempty"`       // gr.Error title, for app_error
	RetryAfter int    `json:"retry_after,omitempty"` // seconds; also sent as Retry-After
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// statusClientClosed is the status logged (never sent) when the caller went
// away before the answer; nginx's convention.
const statusClientClosed = 499

func badRequest(code, format string, a ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, a...)}
}

// toAPIError maps an error of a call to its HTTP answer. The order matters:
// the most specific cause wins.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if e := poolError(err); e != nil {
		return e
	}
	var (
		argErr    *gradio.ArgumentError
		appErr    *gradio.AppError
		spaceErr  *gradio.SpaceError
		uploadErr *gradio.UploadTooLargeError
		lostErr   *gradio.ConnectionLostError
	)
	switch {
	case errors.As(err, &argErr):
		return &apiError{Status: http.StatusBadRequest, Code: "bad_arguments", Message: argErr.Error()}
	case errors.Is(err, gradio.ErrUnknownEndpoint):
		return &apiError{Status: http.StatusNotFound, Code: "unknown_endpoint", Message: err.Error()}
	case errors.As(err, &appErr):
		return &apiError{Status: http.StatusUnprocessableEntity, Code: "app_error", Message: appErr.Message, Title: appErr.Title}
	case errors.As(err, &uploadErr):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "upload_too_large", Message: uploadErr.Error()}
	case errors.Is(err, gradio.ErrMaybeAccepted) && errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusGatewayTimeout, Code: "maybe_accepted",
			Message: "the caller's deadline passed before the app answered the join: the call may have been queued there (if so it is cancelled); it was not retried"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusGatewayTimeout, Code: "deadline_exceeded", Message: "the call did not finish before the caller's deadline: " + err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, gradio.ErrCanceled):
		return &apiError{Status: statusClientClosed, Code: "canceled", Message: "the call was cancelled: " + err.Error()}
	case errors.Is(err, gradio.ErrQueueFull):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "app_queue_full", Message: err.Error(), RetryAfter: 1}
	case errors.As(err, &spaceErr):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "replica_unavailable", Message: err.Error(), RetryAfter: 10}
	case errors.Is(err, gradio.ErrSlowReader):
		// Its stream's reader fell more than 16 MiB behind the app: the
		// caller's fault, and the call is cancelled at the app.
		return &apiError{Status: http.StatusRequestTimeout, Code: "slow_reader", Message: err.Error()}
	case errors.Is(err, gradio.ErrEventShare):
		// The caller's own parallel outputs filled its share of the event
		// budget: its fault, answered as a limit it can retry under.
		return &apiError{Status: http.StatusTooManyRequests, Code: "event_share", Message: err.Error(), RetryAfter: 1}
	case errors.As(err, &lostErr):
		return &apiError{Status: http.StatusBadGateway, Code: "connection_lost", Message: err.Error()}
	case errors.Is(err, gradio.ErrUnauthorized):
		return &apiError{Status: http.StatusBadGateway, Code: "upstream_unauthorized", Message: err.Error()}
	}
	var me *gradio.MetadataError
	var ce *gradio.ConnectError
	var pe *gradio.ProtocolError
	if errors.As(err, &me) || errors.As(err, &ce) || errors.As(err, &pe) {
		return &apiError{Status: http.StatusBadGateway, Code: "upstream_error", Message: err.Error()}
	}
	return &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
}

// errDrainTimeout is the cause of the contexts the drain cancels when its
// time-out passed with calls still in flight.
var errDrainTimeout = errors.New("gateway: drain time-out, the gateway is shutting down")

func errDraining() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: "draining", Message: "the gateway is shutting down", RetryAfter: 1}
}

// callError is toAPIError for the error of a call made under ctx (the
// request's, or the gateway's job context): a call cut by the drain is
// "503 draining", not a cancel by the caller; and a cancel that did not come
// from the caller (the app cancelled the job) is answered, since the caller
// still listens, rather than left as an empty 200.
func callError(ctx context.Context, err error) *apiError {
	if errors.Is(context.Cause(ctx), errDrainTimeout) {
		e := errDraining()
		e.Message = "the gateway shut down before the call finished (drain_timeout)"
		return e
	}
	e := toAPIError(err)
	if e.Status == statusClientClosed && ctx.Err() == nil {
		e = &apiError{Status: http.StatusBadGateway, Code: e.Code, Message: e.Message}
	}
	return e
}

// writeError answers e as JSON; a 499 is not written (nobody listens).
func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == statusClientClosed {
		w.WriteHeader(statusClientClosed)
		return
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Bounds on caller input echoed in answers and logs: a long api_name or
// path must not come back at full length in every error and log line.
const (
	maxEcho       = 200 // in error messages
	maxLoggedPath = 512 // in the access log
	maxAPINameLen = 256 // longer api_names are refused (Gradio's are short identifiers)
)

// clip shortens s to at most n bytes (on a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("...(%d bytes)", len(s))
}

// codeAppError is the code of an app's own error (gr.Error): the call
// reached the app, which refused it. (callError writes it as a literal, which
// api/openapi_test.go finds in the source.)
const codeAppError = "app_error"
