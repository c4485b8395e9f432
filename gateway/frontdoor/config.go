package frontdoor

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of [Config].
const (
	DefaultSessionTTL = time.Hour
	DefaultUploadTTL  = time.Hour
	// DefaultFileURLTTL: a page's output files stay downloadable for an
	// hour, and a URL that leaks (a log, a shared link) is not a
	// capability for ever.
	DefaultFileURLTTL = time.Hour
	// DefaultMaxBodyBytes is also the gateway's max_body_bytes default.
	DefaultMaxBodyBytes = 10 << 20
	// DefaultReadGrace is long enough for a client to open its data
	// stream after the join's answer (the official clients do at once),
	// short enough that joins nobody reads cannot hold the pool's slots.
	DefaultReadGrace = 5 * time.Second
	// defaultQueueUpdateInterval is Config.QueueUpdateInterval's default.
	defaultQueueUpdateInterval = 500 * time.Millisecond
	// DefaultMaxSessions bounds the caller sessions kept (about 1 KiB
	// each): 20 MiB at most.
	DefaultMaxSessions = 20000
	// DefaultMaxSessionsPerClient leaves room for many browser tabs (or
	// users behind one address) while one client cannot fill the table.
	DefaultMaxSessionsPerClient = 500
	// DefaultMaxFilesPerUpload bounds the parts of one upload request: a
	// browser sends one part per file the user picked.
	DefaultMaxFilesPerUpload = 100
	// DefaultMaxUploadBytesPerClient and DefaultMaxUploadBytes bound the
	// disk the uploads waiting for their joins take.
	DefaultMaxUploadBytesPerClient = 1 << 30
	DefaultMaxUploadBytes          = 8 << 30
)

// UserHeader names the caller's user (an e-mail); absent means anonymous.
const UserHeader = "X-Gradiopool-User"

// Config configures a [FrontDoor]. The zero value works.
type Config struct {
	// SessionTTL is how long a caller session is kept after its last
	// request when it has no stream open. Zero means DefaultSessionTTL.
	SessionTTL time.Duration
	// UploadTTL is how long an upload is kept for the joins that use it.
	// Zero means DefaultUploadTTL.
	UploadTTL time.Duration
	// HeartbeatInterval is the period of "data: ALIVE" on
	// /heartbeat/{session_hash}. Zero means gradio.DefaultHeartbeatInterval
	// (Gradio's own, 15 s).
	HeartbeatInterval time.Duration
	// MaxBodyBytes bounds a join, cancel or reset body. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ReadGrace is how long an accepted call may wait for its caller to
	// open the session's queue/data stream: past it, with no stream open,
	// the call is cancelled at the replica and its slot freed (a join
	// nobody reads would hold a slot for ever). Zero means
	// DefaultReadGrace; negative: never.
	ReadGrace time.Duration
	// QueueUpdateInterval bounds how often a join waiting in the
	// gateway's queue (every replica busy) gets an estimation message
	// (its rank, the queue's size, an ETA) on its caller's stream: at
	// most one per interval per call, only when its place changed. Zero
	// means defaultQueueUpdateInterval; negative: the join waits for its
	// slot before it is answered, and the caller sees no place.
	QueueUpdateInterval time.Duration
	// MaxSessions bounds the caller sessions this front door keeps; a new
	// one past it is answered 503. Zero means DefaultMaxSessions;
	// negative: no limit.
	MaxSessions int
	// MaxSessionsPerClient bounds the caller sessions of one client
	// (ClientID); a new one past it is answered 429. Zero means
	// DefaultMaxSessionsPerClient; negative: no limit.
	MaxSessionsPerClient int
	// ClientID names a request's client for MaxSessionsPerClient (the
	// gateway: its API key's hash, else its address). Nil: the keyed
	// hash of Authorization, else the remote address's host.
	ClientID func(r *http.Request) string
	// BeginCall, if set, counts a join against its client's limit (the
	// gateway's max_calls_per_client) until the call ends; ok false: the
	// join is answered 429. Nil: no limit.
	BeginCall func(r *http.Request) (release func(), ok bool)
	// MaxFileBytes bounds one uploaded file (413 past it). Zero means
	// the app's max_file_size when its config has one, else MaxBodyBytes;
	// negative: no limit.
	MaxFileBytes int64
	// MaxFilesPerUpload bounds the parts of one upload request (413 past
	// it). Zero means DefaultMaxFilesPerUpload; negative: no limit.
	MaxFilesPerUpload int
	// MaxUploadBytesPerClient bounds the upload bytes one client
	// (ClientID) has on disk (429 past it) and MaxUploadBytes everyone's
	// (503). Zero means the defaults; negative: no limit.
	MaxUploadBytesPerClient int64
	MaxUploadBytes          int64
	// UploadDir holds uploads until their join. Empty means a fresh
	// temporary directory, removed by Close.
	UploadDir string
	// UploadHome names this front door among a cluster's: it starts the
	// id of every upload kept here, so that a join forwarded to another
	// gateway (the owner of its session) can fetch the file here with
	// FetchUpload. Empty: uploads are local.
	UploadHome string
	// FetchUpload, if set, returns the content of upload id kept by the
	// front door named home (see UploadHome; [FrontDoor.OpenUpload] there):
	// a join names an upload another gateway of the cluster took. An
	// error wrapping ErrUploadNotFound tells the caller to upload again.
	FetchUpload func(ctx context.Context, home, id string) (io.ReadCloser, error)
	// TrustForwarded makes the announced root honour X-Forwarded-Proto and
	// X-Forwarded-Host (set it only behind a proxy that sets them).
	TrustForwarded bool
	// FileURLTTL is how long a signed file URL handed out by the gateway
	// (an output file of a replica) can be used. Zero means
	// DefaultFileURLTTL; negative: for ever.
	FileURLTTL time.Duration
	// PublicURL is the gateway's URL as callers reach it
	// ("https://gw.example.com"): the root /config announces and file URLs
	// start with, whatever the Host header says. Empty: the Host header
	// when it is ListenAddr or a loopback name, else ListenAddr.
	// TrustForwarded wins over it.
	PublicURL string
	// ListenAddr is the gateway's listen address (host:port), for the
	// Host check when PublicURL is not set.
	ListenAddr string
	// ForwardCallerToken sends the caller's own Hugging Face token (and
	// X-IP-Token) to the replicas instead of the gateway's HF_TOKEN: taken
	// from X-HF-Authorization, or from Authorization when CallerAuthIsKey
	// is false.
	ForwardCallerToken bool
	// ShowReplicaErrors passes the replicas' own error answers (a Python
	// traceback, a proxy's page) and the pool's error texts (they name
	// the replicas by URL) on to callers. Default false: callers get
	// Gradio's {"detail": ...} with the gateway's own message, and the
	// details go to the log.
	ShowReplicaErrors bool
	// CallerAuthIsKey says that Authorization carries the gateway's API
	// key (GRADIOPOOL_API_KEYS is set), not an HF token.
	CallerAuthIsKey bool
	// HashKey keys the signatures of file URLs, the session owner hash and
	// the user hash of logs. Empty means random per process (file URLs
	// then do not survive a restart).
	HashKey []byte
	// AppID is the app_id presented in /config and /app_id, which
	// @gradio/client's reconnect() compares to tell a restarted app.
	// Zero: a random one per process, as Gradio's own. The gateways of a
	// cluster present one, so that a client moving between them sees
	// one app.
	AppID uint64
	// HashUser returns the loggable hash of a user (an e-mail). Nil means
	// the pool's [pool.Pool.UserTag] (its one keyed hash of users).
	HashUser func(string) string
	// PinSessions sends every call of a caller session to the session's
	// replica. Default false: a call to an endpoint that keeps no session
	// state (see [FrontDoor.Spreadable]) goes to the replica the pool's
	// rule picks for it, like the /v1 calls.
	PinSessions bool
	// PinnedEndpoints names endpoints (api names, with or without "/", or
	// "#N" for fn_index N) whose calls always go to the session's replica:
	// for apps that keep server state keyed on the session hash outside
	// gr.State.
	PinnedEndpoints []string
	// OnCall, if set, is told about every front-door call that ended:
	// accepted calls when their process_completed passes (or they are
	// lost), joins that no replica took. It must be quick (metrics).
	OnCall func(CallEnd)
	// Annotate, if set, adds fields to the access line of r (the user's
	// hash, the replica, the endpoint, an error code). Nil: none.
	Annotate func(r *http.Request, attrs ...slog.Attr)
	// Logger receives session events. Nil means no logging.
	Logger *slog.Logger
	// Now is the clock (tests inject one). Nil means time.Now.
	Now func() time.Time
}

// CallEnd is one front-door call that ended (Config.OnCall).
type CallEnd struct {
	Replica  string        // "" when no replica took the call
	Endpoint string        // "fn_index=N", as the caller's join named it
	User     string        // the user's loggable hash (Config.HashUser); "" anonymous
	Wait     time.Duration // from the join's arrival to a slot
	Duration time.Duration // from the join's arrival to the end
	// Code is "" for a completed call, "app_error" when the app answered
	// with an error (process_completed with success false: gr.Error), else
	// why the call failed: "no_replica" (no replica could take the join),
	// "refused" (every replica tried refused it), "replica_lost" (accepted,
	// or maybe, then the replica was lost: never run again),
	// "bad_arguments" (the app refused its input), "client_closed" (the
	// caller's stream went away), "expired" (its session expired),
	// "shutdown" (the front door closed), "not_read" (no data stream within
	// ReadGrace: given up).
	Code string
}

// CallEnd codes.
const (
	codeAppError     = "app_error"
	codeNoReplica    = "no_replica"    // no replica could take the join
	codeRefused      = "refused"       // every replica tried refused the join
	codeReplicaLost  = "replica_lost"  // accepted (or maybe), then the replica was lost
	codeBadInput     = "bad_arguments" // the app refused the join's input
	codeClientClosed = "client_closed" // the caller's stream went away with the call in flight
	codeExpired      = "expired"       // the session expired with the call in flight
	codeShutdown     = "shutdown"      // the front door closed with the call in flight
	codeNotRead      = "not_read"      // no data stream was opened within ReadGrace: cancelled
)
