package gradio

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gradiopool/gradiopool/internal/sse"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// app is what all sessions of one Connect share: base URL, config, API
// info, HTTP client and cookies. Nothing in it changes after Connect except
// the lazily fetched API info.
type app struct {
	src     string // what the caller passed to Connect (Space id or URL)
	base    string // base URL without trailing slash
	spaceID string
	cfg     *Config
	set     settings
	hc      *http.Client
	own     *http.Transport // our transport (nil when the caller gave a client)
	jar     http.CookieJar
	log     *slog.Logger
	refs    atomic.Int64 // open sessions; the last Close releases idle conns
	// noPreopen is set once the app answered a stream opened ahead of a
	// join with session_not_found (see submitQueued).
	noPreopen atomic.Bool
	// lastMsg is when a data stream of any session last brought a message
	// (a heartbeat included), Unix nanoseconds; 0: never.
	lastMsg atomic.Int64
	// useCall is set once queue/join answered 404/405: calls go through
	// /call from then on (see callrest.go).
	useCall atomic.Bool

	infoMu sync.Mutex // guards info; held while /info is fetched
	info   *APIInfo

	// budget is the app's part of its EventBudget (eventbudget.go).
	budgetOnce sync.Once
	budget     *sse.Budget
}

// Client is one connected Gradio app plus one session hash. It is safe for
// concurrent use; concurrent calls of one Client share the session (its
// gr.State and its single queue/data stream). Use NewSession for calls that
// must be independent.
type Client struct {
	app  *app
	sess *appSession
}

// Connect resolves src, fetches the app's config and returns a Client with
// a fresh session.
//
// src is a Space id ("owner/name", resolved through the Hub API: GET
// {hub}/api/spaces/{id}, and /host if that lacks a host) or an http(s) URL
// of the app, with or without trailing slash (including
// https://owner-name.hf.space and apps mounted at a sub-path). Connect then
// logs in if WithLogin was given and fetches GET {base}/config: one round
// trip for a URL. /info is fetched lazily (see WithEagerInfo). No stream is
// opened until the first call.
//
// Errors: *SpaceError (Space not running), *MetadataError (Hub, login,
// config unusable; wraps ErrNotFound, ErrUnauthorized, ErrLoginFailed or
// ErrUnsupportedProtocol where they apply), *ConnectError (transport failure
// or time-out), or ctx's error.
func Connect(ctx context.Context, src string, opts ...Option) (*Client, error) {
	set := defaultSettings()
	for _, o := range opts {
		o(&set)
	}
	a := &app{src: src, set: set, log: set.logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.jar, _ = cookiejar.New(nil)
	if set.httpClient != nil {
		hc := *set.httpClient // a copy: the caller's client is not changed
		a.hc = &hc
	} else {
		a.own = newTransport(set)
		a.hc = &http.Client{Transport: a.own}
	}
	a.hc.CheckRedirect = a.checkRedirect(a.hc.CheckRedirect)
	fail := func(err error) (*Client, error) {
		if a.own != nil {
			a.own.CloseIdleConnections()
		}
		return nil, err
	}
	src = strings.TrimSpace(src)
	switch {
	case strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://"):
		u, err := url.Parse(src)
		if err != nil || u.Host == "" {
			return fail(&MetadataError{Src: src, Op: "resolve", Err: fmt.Errorf("bad URL: %v", err)})
		}
		u.RawQuery, u.Fragment = "", ""
		a.base = trimSlash(u.String())
		if h := u.Hostname(); strings.HasSuffix(h, ".hf.space") {
			a.spaceID = strings.TrimSuffix(h, ".hf.space") // subdomain; informational
		}
	case spaceIDRe.MatchString(src):
		a.spaceID = src
		host, err := a.resolveSpace(ctx, src)
		if err != nil {
			return fail(err)
		}
		a.base = trimSlash(host)
	default:
		return fail(&MetadataError{Src: src, Op: "resolve", Err: errors.New(`not a Space id ("owner/name") or an http(s) URL`)})
	}
	if set.user != "" {
		if err := a.login(ctx); err != nil {
			return fail(err)
		}
	}
	cfg, err := a.fetchConfigWaking(ctx)
	if err != nil {
		return fail(err)
	}
	switch cfg.Protocol {
	case protocolSSEv3, protocolSSEv21, protocolSSEv2, protocolSSEv1, protocolSSE:
	case protocolWS:
		if !versionAtLeast(cfg.Version, "3.0") {
			return fail(&MetadataError{Src: a.src, Op: "config", Err: fmt.Errorf("%w: Gradio %s", ErrUnsupportedProtocol, cfg.Version)})
		}
	default:
		return fail(&MetadataError{Src: a.src, Op: "config", Err: fmt.Errorf("%w: %q (Gradio %s); this client speaks ws (3.x), sse, sse_v1, sse_v2, sse_v2.1 and sse_v3 (Gradio 4.x-6.x)", ErrUnsupportedProtocol, cfg.Protocol, cfg.Version)})
	}
	a.cfg = cfg
	if set.eagerInfo {
		if _, err := a.apiInfo(ctx); err != nil {
			return fail(err)
		}
	}
	a.log.Debug("gradio: connected", "base", a.base, "version", cfg.Version, "protocol", cfg.Protocol, "api_prefix", cfg.APIPrefix)
	return &Client{app: a, sess: newSession(a)}, nil
}

var spaceIDRe = regexp.MustCompile(`^[a-zA-Z0-9_\-\.]+/[a-zA-Z0-9_\-\.]+$`)

// newTransport builds the per-app transport: keep-alive pool sized for many
// parallel calls, phase time-outs instead of a global one.
func newTransport(set settings) *http.Transport {
	d := &net.Dialer{Timeout: defaultDialTimeout, KeepAlive: 30 * time.Second}
	idle, noReuse := set.keepAlive, false
	if idle <= 0 {
		// net/http reads a zero IdleConnTimeout as "no limit".
		idle, noReuse = 0, true
	}
	return &http.Transport{
		DisableKeepAlives:     noReuse,
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          0, // no global cap
		MaxIdleConnsPerHost:   defaultMaxIdleConnsPerHost,
		IdleConnTimeout:       idle,
		TLSHandshakeTimeout:   defaultTLSHandshakeTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// NewSession returns a Client for the same app (config, API info, HTTP
// transport, login cookies) with a fresh session hash: its own gr.State and
// its own stream. It makes no network request.
func (c *Client) NewSession() *Client {
	return &Client{app: c.app, sess: newSession(c.app)}
}

// SessionHash returns the session hash sent with every call.
func (c *Client) SessionHash() string { return c.sess.hash }

// LastMessage is when a queue/data stream of any session of this app last
// brought a message, Gradio's heartbeats included (zero: never). An app
// slow to answer requests (its threads busy) while its streams still
// deliver is busy, not hung.
func (c *Client) LastMessage() time.Time {
	if n := c.app.lastMsg.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// NoteStreamMessage records that a queue/data stream of this app brought
// a message (a heartbeat included) that the caller read itself, as a
// gateway relaying its callers' streams does ([Client.Do]):
// [Client.LastMessage] counts it like a message of this client's own
// streams, so that an app busy with relayed calls only is not taken for
// hung when it answers requests late.
func (c *Client) NoteStreamMessage() { c.app.lastMsg.Store(time.Now().UnixNano()) }

// BaseURL returns the app's base URL (no trailing slash): the URL given to
// Connect or the host the Hub returned.
func (c *Client) BaseURL() string { return c.app.base }

// SpaceID returns the Space id the Client was connected through ("" for
// URLs other than *.hf.space, where it is the subdomain).
func (c *Client) SpaceID() string { return c.app.spaceID }

// Config returns the app's config as fetched by Connect, with the
// components and dependencies that gr.render functions called in this
// Client's session created merged in (each NewSession starts from the
// app's own config). Do not modify it.
func (c *Client) Config() *Config { return c.sess.config() }

// APIInfo returns the app's /info, fetching it on first use.
func (c *Client) APIInfo(ctx context.Context) (*APIInfo, error) { return c.app.apiInfo(ctx) }

// String describes the Client without credentials.
func (c *Client) String() string {
	return fmt.Sprintf("gradio.Client{%s session=%s}", redactSource(c.app.base), c.sess.hash)
}

// LogValue implements slog.LogValuer without credentials.
func (c *Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base", redactSource(c.app.base)), slog.String("session", c.sess.hash))
}

// Close ends this session's streams; its pending jobs fail with ErrClosed
// and are cancelled at the app.
// Other sessions of the same app are not affected. Close waits for the
// session's goroutines (including /cancel requests, bounded by the cancel
// timeout). Calling it twice is harmless.
func (c *Client) Close() error {
	c.sess.close()
	return nil
}

// Ping makes a cheap request (GET {prefix}/app_id, falling back to
// /config on 404) and returns an error wrapping ErrAppChanged when the app
// restarted since Connect (different app_id). It does not count as use of
// the session.
func (c *Client) Ping(ctx context.Context) error {
	a := c.app
	req, err := a.newRequest(ctx, http.MethodGet, a.api("app_id"), nil)
	if err != nil {
		return err
	}
	resp, err := a.do(req, true)
	if err != nil {
		return &ConnectError{Src: a.src, Err: err}
	}
	body, err := a.readBody(resp)
	if err != nil {
		return &ConnectError{Src: a.src, Err: err}
	}
	if resp.StatusCode == http.StatusNotFound {
		cfg, err := a.fetchConfig(ctx)
		if err != nil {
			return err
		}
		return a.compareAppID(cfg.AppID)
	}
	if resp.StatusCode != http.StatusOK {
		return &MetadataError{Src: a.src, Op: "app_id", StatusCode: resp.StatusCode, Err: statusErr(resp.StatusCode)}
	}
	var v struct {
		AppID json.Number `json:"app_id"`
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return &MetadataError{Src: a.src, Op: "app_id", Err: fmt.Errorf("bad body %q: %w", excerpt(body), err)}
	}
	var id uint64
	if _, err := fmt.Sscan(v.AppID.String(), &id); err != nil {
		return &MetadataError{Src: a.src, Op: "app_id", Err: fmt.Errorf("bad app_id %q", v.AppID)}
	}
	return a.compareAppID(id)
}

func (a *app) compareAppID(id uint64) error {
	if a.cfg.AppID != 0 && id != a.cfg.AppID {
		return fmt.Errorf("%w: app_id %d, connected to %d", ErrAppChanged, id, a.cfg.AppID)
	}
	return nil
}

// api builds {base}{prefix}/{p}.
func (a *app) api(p string) string {
	prefix := ""
	if a.cfg != nil {
		prefix = a.cfg.APIPrefix
	}
	return a.base + prefix + "/" + p
}

func trimSlash(s string) string { return strings.TrimRight(s, "/") }

// newRequest builds a request to the app with auth, extra headers and
// cookies.
func (a *app) newRequest(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("gradio: build request: %w", err)
	}
	h := req.Header
	if a.set.hfToken != "" {
		h["Authorization"] = []string{"Bearer " + a.set.hfToken.reveal()}
	}
	for k, v := range a.set.headers {
		h[k] = v
	}
	h["User-Agent"] = userAgent
	return req, nil
}

var userAgent = []string{"gradiopool-go"}

// checkRedirect keeps the HF token, the extra headers and the cookies to
// the app's own host (scheme, host and port) when a redirect is followed:
// net/http alone forwards custom headers everywhere, and Authorization to
// any port of the same host name. prev is the client's own policy.
func (a *app) checkRedirect(prev func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if !sameHost(req.URL.String(), a.base) {
			req.Header.Del("Authorization")
			req.Header.Del("Cookie")
			for k := range a.set.headers {
				req.Header.Del(k)
			}
		}
		if prev != nil {
			return prev(req, via)
		}
		if len(via) >= 10 {
			return errors.New("gradio: stopped after 10 redirects")
		}
		return nil
	}
}

// do sends req. With headerTimeout it bounds the wait for response headers
// (not the body: streams and long downloads are not cut). Cookies are
// taken from and stored into the app's jar.
func (a *app) do(req *http.Request, headerTimeout bool) (*http.Response, error) {
	for _, ck := range a.jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	var (
		cancel context.CancelCauseFunc
		timer  *time.Timer
	)
	if d := a.set.headerTimeout; headerTimeout && d > 0 {
		var ctx context.Context
		ctx, cancel = context.WithCancelCause(req.Context())
		timer = time.AfterFunc(d, func() { cancel(fmt.Errorf("no response headers within %s", d)) })
		req = req.WithContext(ctx)
	}
	resp, err := a.hc.Do(req)
	if timer != nil {
		timer.Stop()
	}
	if err != nil {
		if cancel != nil {
			err = withCause(req.Context(), err)
			cancel(nil)
		}
		return nil, err
	}
	if cks := resp.Cookies(); len(cks) > 0 {
		a.jar.SetCookies(req.URL, cks)
	}
	if cancel != nil {
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	}
	return resp, nil
}

// doWhileAlive is Client.DoWhileAlive.
func (a *app) doWhileAlive(req *http.Request) (*http.Response, error) {
	d := a.set.headerTimeout
	if d <= 0 {
		return a.do(req, false)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	sent := time.Now()
	answered := make(chan struct{})
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		for {
			select {
			case <-answered:
				return
			case <-t.C:
			}
			alive := sent
			if n := a.lastMsg.Load(); n != 0 && time.Unix(0, n).After(alive) {
				alive = time.Unix(0, n)
			}
			if left := d - time.Since(alive); left > 0 {
				t.Reset(left)
				continue
			}
			cancel(fmt.Errorf("no response headers, and no message on the app's streams, within %s", d))
			return
		}
	}()
	resp, err := a.do(req.WithContext(ctx), false)
	close(answered)
	if err != nil {
		err = withCause(ctx, err)
		cancel(nil)
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

// withCause adds to err, a request's failure, why ctx ended (a time-out
// of ours, not the caller's cancellation) when err does not say it yet.
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && !strings.Contains(err.Error(), cause.Error()) {
		return fmt.Errorf("%w (%v)", err, cause)
	}
	return err
}

type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// maxMetaBody bounds config/info/json bodies: a big app's config is
// hundreds of KB, so a larger answer is a broken or hostile replica, and
// reading it (then decoding it) would cost several times its size.
const maxMetaBody = 16 << 20

// readBody reads and closes a response body of at most maxMetaBody bytes.
// The body must arrive within the header time-out after the headers: a
// replica that sends headers and then stalls its body (or trickles it a
// byte at a time) ends in an error instead of holding its caller, which
// may be the pool's connect, for good.
func (a *app) readBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	d := a.set.headerTimeout
	if d <= 0 {
		d = defaultHeaderTimeout
	}
	var late atomic.Bool
	t := time.AfterFunc(d, func() {
		late.Store(true)
		resp.Body.Close() // unblocks the read below
	})
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetaBody+1))
	t.Stop()
	if late.Load() {
		return nil, fmt.Errorf("%w: no complete response body within %s", errBodyTimeout, d)
	}
	if err == nil && len(b) > maxMetaBody {
		return nil, fmt.Errorf("%w: response body larger than %d MiB", errResponseTooLarge, maxMetaBody>>20)
	}
	return b, err
}

func statusErr(code int) error {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrUnauthorized
	case http.StatusNotFound:
		return ErrNotFound
	}
	return nil
}

// fetchConfigWaking fetches the config; with a wake timeout it keeps
// retrying while the app answers 502/503/504 (a Space still booting, or a
// sleeping *.hf.space URL being woken by the request itself).
func (a *app) fetchConfigWaking(ctx context.Context) (*Config, error) {
	deadline := time.Now().Add(a.set.wakeTimeout)
	for {
		cfg, err := a.fetchConfig(ctx)
		var me *MetadataError
		if err == nil || a.set.wakeTimeout <= 0 || !errors.As(err, &me) {
			return cfg, err
		}
		switch me.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		default:
			return nil, err
		}
		wait := a.set.wakePoll
		left := time.Until(deadline)
		if left <= 0 {
			return nil, err
		}
		if wait > left {
			wait = left
		}
		a.log.Info("gradio: app not ready, retrying config", "src", redactSource(a.src), "status", me.StatusCode)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

var gradioConfigRe = regexp.MustCompile(`window\.gradio_config = (.*?);[\s]*</script>`)

// fetchConfig GETs {base}/config (never under the prefix), falling back to
// the config embedded in the HTML page for old apps.
func (a *app) fetchConfig(ctx context.Context) (*Config, error) {
	body, code, err := a.getMeta(ctx, a.base+"/config")
	if err != nil {
		return nil, err
	}
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return nil, &MetadataError{Src: a.src, Op: "config", StatusCode: code, Err: fmt.Errorf("%w: %s", ErrUnauthorized, a.refusedHint(body))}
	case code == http.StatusTooManyRequests:
		return nil, &MetadataError{Src: a.src, Op: "config", StatusCode: code, Err: fmt.Errorf("%w: too many requests, try again later", ErrRateLimited)}
	case code != http.StatusOK:
		// Old apps (and some proxies) only embed the config in the page.
		page, pcode, perr := a.getMeta(ctx, a.base+"/")
		if perr == nil && pcode == http.StatusOK {
			if m := gradioConfigRe.FindSubmatch(page); m != nil {
				body, code = m[1], http.StatusOK
				break
			}
		}
		return nil, &MetadataError{Src: a.src, Op: "config", StatusCode: code, Err: statusErr(code)}
	}
	cfg, err := ParseConfig(body)
	if err != nil {
		return nil, &MetadataError{Src: a.src, Op: "config", Err: err}
	}
	if cfg.AuthRequired && len(cfg.Dependencies) == 0 {
		return nil, &MetadataError{Src: a.src, Op: "config", Err: fmt.Errorf("%w: the app requires its own login (a username and password)", ErrUnauthorized)}
	}
	return cfg, nil
}

// refusedHint says why /config answered 401 or 403. Gradio's own login
// answers FastAPI's JSON {"detail": ...}; the Hugging Face proxy of a
// private Space answers a page of its own, and with a token set that means
// the token was refused.
func (a *app) refusedHint(body []byte) string {
	var v struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil && len(v.Detail) > 0 {
		return "the app requires its own login (a username and password)"
	}
	if a.set.hfToken != "" {
		return "the HF token was refused: it is wrong, expired or cannot read this private Space"
	}
	if a.spaceID != "" {
		return "the Space is private (give a Hugging Face token: HF_TOKEN), or the app requires its own login"
	}
	return "the app requires its own login, or it is a private Space (give a Hugging Face token: HF_TOKEN)"
}

// getMeta GETs a metadata document; transport failures become
// *ConnectError.
func (a *app) getMeta(ctx context.Context, u string) ([]byte, int, error) {
	req, err := a.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := a.do(req, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, &ConnectError{Src: a.src, Err: err}
	}
	body, err := a.readBody(resp)
	if err != nil {
		return nil, 0, &ConnectError{Src: a.src, Err: err}
	}
	return body, resp.StatusCode, nil
}

// apiInfo returns the cached /info (with all_endpoints, so undocumented
// endpoints have parameters too), fetching it once; a failed fetch is
// retried by the next caller.
func (a *app) apiInfo(ctx context.Context) (*APIInfo, error) {
	a.infoMu.Lock()
	defer a.infoMu.Unlock()
	if a.info != nil {
		return a.info, nil
	}
	body, code, err := a.getMeta(ctx, a.api("info?all_endpoints=True"))
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, &MetadataError{Src: a.src, Op: "info", StatusCode: code, Err: statusErr(code)}
	}
	info, err := parseAPIInfo(body)
	if err != nil {
		return nil, &MetadataError{Src: a.src, Op: "info", Err: err}
	}
	a.info = info
	return info, nil
}

// login POSTs the credentials form to {base}/login; the cookies land in
// the jar.
func (a *app) login(ctx context.Context) error {
	form := url.Values{"username": {a.set.user}, "password": {a.set.password.reveal()}}
	req, err := a.newRequest(ctx, http.MethodPost, a.base+"/login", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := a.do(req, true)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ConnectError{Src: a.src, Err: err}
	}
	body, _ := a.readBody(resp)
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnauthorized:
		return &MetadataError{Src: a.src, Op: "login", StatusCode: resp.StatusCode, Err: fmt.Errorf("%w: incorrect credentials", ErrLoginFailed)}
	default:
		return &MetadataError{Src: a.src, Op: "login", StatusCode: resp.StatusCode, Err: fmt.Errorf("%w: %s", ErrLoginFailed, excerpt(body))}
	}
}

// newSessionHash returns a random session hash.
func newSessionHash() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
