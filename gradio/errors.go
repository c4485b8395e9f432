package gradio

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Sentinel errors. Test with errors.Is; the typed errors below wrap them
// where noted.
var (
	// ErrQueueFull: the app's queue is full (503 "Queue is full" on
	// queue/join, or the v0 queue_full message). The call was NOT accepted
	// and may be retried. Other 503 answers (a sleeping or crashed Space) are
	// a *ProtocolError with StatusCode 503.
	ErrQueueFull = errors.New("gradio: queue is full")
	// ErrUnsupportedProtocol: the app speaks a protocol this client does not
	// implement (Gradio 3 "ws", or an unknown protocol string).
	ErrUnsupportedProtocol = errors.New("gradio: unsupported protocol")
	// ErrClosed: the Client (session) was closed.
	ErrClosed = errors.New("gradio: client closed")
	// ErrAppChanged: the app restarted (its app_id differs from the config
	// this Client was connected with). Reconnect to get the new config.
	ErrAppChanged = errors.New("gradio: app changed (restarted)")
	// ErrUnknownEndpoint: no callable endpoint has that api_name or fn_index.
	ErrUnknownEndpoint = errors.New("gradio: unknown endpoint")
	// ErrCanceled: the job was cancelled with Job.Cancel.
	ErrCanceled = errors.New("gradio: job cancelled")
	// ErrMaybeAccepted: the caller's context ended while queue/join was in
	// flight, so Submit returned without knowing whether the app queued the
	// call. The error also wraps ctx's error. The join finishes (or times
	// out) in the background, and a job the app accepted after all is
	// cancelled there; the call must not be retried blindly.
	ErrMaybeAccepted = errors.New("gradio: the app had not answered the join when the caller's context ended; the call may have been accepted")
	// ErrSpaceNotRunning is wrapped by every *SpaceError.
	ErrSpaceNotRunning = errors.New("gradio: space not running")
	// ErrNotFound: the Hub or the app answered 404 for the Space or route.
	ErrNotFound = errors.New("gradio: not found")
	// ErrUnauthorized: 401/403; a private Space without a (valid) token, or
	// an auth-protected app without login.
	ErrUnauthorized = errors.New("gradio: unauthorized")
	// ErrLoginFailed: POST /login rejected the credentials.
	ErrLoginFailed = errors.New("gradio: login failed")
	// ErrRateLimited: HTTP 429 (the Hugging Face proxy's rate limit) on
	// the config or on queue/join; the call was NOT accepted.
	ErrRateLimited = errors.New("gradio: rate limited (HTTP 429)")
	// ErrSlowReader: the job's Events were read slower than the app sent
	// them, more than 4096 events or 16 MiB behind; the job was cancelled
	// at the app.
	ErrSlowReader = errors.New("gradio: the job's events were read slower than the app sent them; the call was cancelled")
)

// Causes wrapped in a *ProtocolError or *MetadataError (callers branch on
// those).
var (
	// errBodyTimeout: a response's headers came but its body did not
	// arrive within the header time-out (a stalled or trickling replica).
	errBodyTimeout = errors.New("gradio: response body timed out")
	// errResponseTooLarge: a config, API info or join answer larger than
	// any real app sends (16 MiB).
	errResponseTooLarge = errors.New("gradio: response too large")
)

// AppError is an error raised by the app's function (gr.Error, or any
// exception when the app runs with show_error). The job ran and failed: it
// must not be retried blindly.
type AppError struct {
	Title   string // gr.Error title ("Error" by default); may be empty
	Message string // the message; a generic text when the app hides errors
	// Hidden is true when the app sent {"error": null}: it raised an
	// exception but does not show error details (show_error=False).
	Hidden bool
	// Duration is how long the UI shows the message (gr.Error duration,
	// default 10 s); 0 when not sent.
	Duration time.Duration
	// Visible is gr.Error's visible flag (true when not sent).
	Visible bool
}

// hiddenErrorMsg is what the Python client says for {"error": null}.
const hiddenErrorMsg = "the upstream Gradio app has raised an exception but has not enabled verbose error reporting; to enable, set show_error=True in launch()"

func (e *AppError) Error() string {
	if e.Title != "" && e.Title != "Error" {
		return "gradio: app error: " + e.Title + ": " + e.Message
	}
	return "gradio: app error: " + e.Message
}

// SpaceError reports a Hugging Face Space that is not running: paused,
// sleeping or building (past the wake timeout), crashed (RUNTIME_ERROR,
// BUILD_ERROR), without an app file, misconfigured (CONFIG_ERROR) or being
// deleted. It wraps ErrSpaceNotRunning.
type SpaceError struct {
	Space string // "owner/name"
	Stage string // the Hub's runtime.stage, e.g. "PAUSED"
	// Err is an optional cause (e.g. the wake timeout's context error).
	Err error
}

func (e *SpaceError) Error() string {
	msg := fmt.Sprintf("gradio: space %s is not running (stage %s)", e.Space, e.Stage)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *SpaceError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrSpaceNotRunning, e.Err}
	}
	return []error{ErrSpaceNotRunning}
}

// Temporary reports whether the stage may change by itself (sleeping,
// building, starting), so that trying later can succeed.
func (e *SpaceError) Temporary() bool {
	switch e.Stage {
	case "SLEEPING", "STOPPED", "BUILDING", "APP_STARTING", "RUNNING_APP_STARTING", "RUNNING_BUILDING":
		return true
	}
	return false
}

// MetadataError reports that the Hub look-up, the login, the config or the
// API info could not be fetched or used: an HTTP error status, a body that is
// not the expected JSON, an unusable config.
type MetadataError struct {
	Src        string // what was being connected to (Space id or URL)
	Op         string // "hub", "login", "config", "info", "app_id"
	StatusCode int    // HTTP status, or 0 when the body was the problem
	Err        error
}

func (e *MetadataError) Error() string {
	s := "gradio: " + e.Op + " of " + redactSource(e.Src)
	if e.StatusCode != 0 {
		s += fmt.Sprintf(": HTTP %d", e.StatusCode)
	}
	if e.Err != nil {
		s += ": " + scrubUserinfo(e.Src, e.Err.Error())
	}
	return s
}

func (e *MetadataError) Unwrap() error { return e.Err }

// ConnectError reports a transport failure or time-out while connecting
// (DNS, TCP, TLS, a reset, no response headers in time). Connecting again
// later may succeed; nothing was submitted to the app.
type ConnectError struct {
	Src string
	Err error
}

func (e *ConnectError) Error() string {
	return "gradio: connect to " + redactSource(e.Src) + ": " + scrubUserinfo(e.Src, e.Err.Error())
}

// redactSource is src fit for errors and logs: a URL's user information
// and query (where Spaces and proxies carry tokens and signatures) are
// replaced by "REDACTED"; a Space id is returned as it is.
func redactSource(src string) string {
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		return src
	}
	u, err := url.Parse(src)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery = "REDACTED"
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// scrubUserinfo removes src's user information from msg: net/http's
// errors quote request URLs, which carry it (with only the password
// masked), while the query is never sent (Connect drops it from the base).
func scrubUserinfo(src, msg string) string {
	u, err := url.Parse(src)
	if err != nil || u.User == nil {
		return msg
	}
	msg = strings.ReplaceAll(msg, u.User.String()+"@", "REDACTED@")
	if name := u.User.Username(); name != "" {
		msg = strings.ReplaceAll(msg, name+":***@", "REDACTED@")
	}
	return msg
}
func (e *ConnectError) Unwrap() error { return e.Err }

// ArgumentError reports arguments that do not fit the endpoint (count,
// unknown or missing keyword arguments, an unreadable file). It is returned
// before any request for the call is made.
type ArgumentError struct {
	Endpoint string
	Msg      string
	Err      error // optional cause
}

func (e *ArgumentError) Error() string {
	s := "gradio: bad arguments for " + e.Endpoint + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ArgumentError) Unwrap() error { return e.Err }

// ProtocolError reports a server response that violates the protocol (an
// unexpected status, undecodable JSON, a message out of order).
type ProtocolError struct {
	Op         string // e.g. "queue/join", "queue/data", "upload"
	StatusCode int    // HTTP status when the problem was the status, else 0
	Body       string // a short excerpt of the offending body
	Err        error
}

func (e *ProtocolError) Error() string {
	s := "gradio: protocol error in " + e.Op
	if e.StatusCode != 0 {
		s += fmt.Sprintf(": HTTP %d", e.StatusCode)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// UploadTooLargeError reports a file larger than the app's max_file_size,
// detected locally before (or while) uploading, or by the app's 413.
type UploadTooLargeError struct {
	Name string
	Size int64 // bytes; -1 when only known to exceed Max
	Max  int64 // the app's limit in bytes; -1 when unknown (413 without a known limit)
}

func (e *UploadTooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("gradio: file %q exceeds the app's maximum upload size of %d bytes", e.Name, e.Max)
	}
	return fmt.Sprintf("gradio: file %q is %d bytes, more than the app's maximum of %d bytes", e.Name, e.Size, e.Max)
}

// ConnectionLostError reports that the stream or transport failed while a
// call was in flight. Accepted says whether the app had accepted the call
// (queue/join returned EventID): if so the job may have run (or still be
// running) and must not be retried blindly. MaybeAccepted says that the
// join request had been sent in full when the connection failed (or its
// answer could not be read): the app may have queued the job without the
// client learning its event id, so it is not provably unaccepted either.
// Only an error with neither set proves that the app never got the call.
type ConnectionLostError struct {
	EventID       string
	Accepted      bool
	MaybeAccepted bool
	Err           error
}

func (e *ConnectionLostError) Error() string {
	switch {
	case e.Accepted:
		return fmt.Sprintf("gradio: connection lost during accepted job %s: %v", e.EventID, e.Err)
	case e.MaybeAccepted:
		return fmt.Sprintf("gradio: connection lost after the job was sent, before the app answered: %v", e.Err)
	}
	return fmt.Sprintf("gradio: connection lost before the job was accepted: %v", e.Err)
}

func (e *ConnectionLostError) Unwrap() error { return e.Err }

// excerpt trims a body for error messages.
func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
