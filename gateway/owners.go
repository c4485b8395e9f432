package gateway

// One owner per session. In a cluster the gateway that binds a caller
// session (its first queue/join) or a signed-in user's sticky session
// owns it: all of that session's calls, their slots, streams and queue
// places live there, exactly as on a single gateway. Every other gateway
// that receives a request of that session forwards it to the owner over
// HTTP (httputil.ReverseProxy, streaming both ways, with the caller's
// headers and cancellation). Redis holds only who owns what; nothing of
// a call in flight is shared.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/pool"
)

// Headers between gateways. A caller's request that carries peerHeader
// without the cluster's token is refused; peerClientHeader is trusted only
// with it.
const (
	peerHeader       = "X-Gradiopool-Peer"
	peerClientHeader = "X-Gradiopool-Peer-Client" // the caller's address as the first gateway saw it
)

// Bounds of a lost owner. A forwarded request whose owner cannot be
// dialled fails at once; one whose owner stops answering is ended when
// ownerProbeMisses probes in a row (each ownerProbeEvery, bounded by
// ownerProbeTimeout) get no answer: within about 6 s. A busy gateway
// answers /healthz in milliseconds; the bound leaves room for a loaded
// machine, where taking a live owner for lost would fail its sessions.
const (
	ownerDialTimeout  = 2 * time.Second
	ownerProbeEvery   = time.Second
	ownerProbeTimeout = 2 * time.Second
	ownerProbeMisses  = 3
	// ownerLostFor is how long a gateway found lost is taken for lost
	// without asking again: the sessions it owned are answered at once.
	ownerLostFor = 5 * time.Second
	// ownerOpTimeout bounds one Redis round trip of the owner records.
	ownerOpTimeout = time.Second
	// peerAddrTTL is how long a gateway's advertised address is kept in
	// Redis without a refresh (every peerAddrTTL/4).
	peerAddrTTL = time.Hour
)

// ownerLostDetail is what a caller of a session whose owner gateway is
// lost is told; its calls there are not run again.
const ownerLostDetail = "gradiopool: the gateway that held this session stopped answering; its calls in flight are lost and not run again; reconnect to start a new session"

// owners claims, looks up and releases the owner records in Redis and
// forwards requests to their owners. Nil outside a cluster.
type owners struct {
	rc     redis.UniversalClient
	prefix string // "{name}:own:"
	self   string // this gateway's record: "id addr"
	id     string
	addr   string // the advertised URL the other gateways reach this one at
	token  string // what a peer sends in peerHeader
	ttl    time.Duration
	log    *slog.Logger

	proxy *httputil.ReverseProxy
	watch *peerWatch
	// lost counts the peers taken for lost (gradiopool_cluster_owners_lost_total).
	lost  atomic.Uint64
	fetch *http.Client // held uploads fetched from their gateway

	ctx    context.Context // ended by close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ownerRecord is who owns a key: a gateway's id and advertised URL.
type ownerRecord struct{ id, addr string }

func parseOwner(v string) ownerRecord {
	id, addr, _ := strings.Cut(v, " ")
	return ownerRecord{id: id, addr: addr}
}

func (o ownerRecord) String() string { return o.id + " " + o.addr }

// peerToken is the credential gateways of one cluster show each other:
// derived from the hash key every gateway of a cluster shares, never the
// key itself, and never sent to a caller.
func peerToken(hashKey, cluster string) string {
	m := hmac.New(sha256.New, []byte(hashKey))
	m.Write([]byte("gradiopool peer\x00" + cluster))
	return hex.EncodeToString(m.Sum(nil))
}

func newOwners(rc redis.UniversalClient, name, id, addr, hashKey string, ttl time.Duration, logger *slog.Logger) *owners {
	o := &owners{rc: rc, prefix: "{" + name + "}:own:", id: id, addr: strings.TrimRight(addr, "/"),
		token: peerToken(hashKey, name), ttl: ttl, log: logger}
	o.self = ownerRecord{id: id, addr: o.addr}.String()
	o.ctx, o.cancel = context.WithCancel(context.Background())
	tr := &http.Transport{
		Proxy:               nil, // peers are reached directly, never through an outgoing proxy
		DialContext:         (&net.Dialer{Timeout: ownerDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	o.watch = newPeerWatch(o.ctx, &http.Client{Transport: tr, Timeout: ownerProbeTimeout}, &o.wg, func(addr string) {
		o.lost.Add(1)
		o.log.Warn("cluster: a gateway owning sessions is lost; their streams end with an error and their sessions bind anew", slog.String("peer", addr))
	})
	o.fetch = &http.Client{Transport: tr}
	o.proxy = &httputil.ReverseProxy{
		Rewrite:        o.rewrite,
		Transport:      tr,
		FlushInterval:  -1, // event streams: every write at once
		ErrorHandler:   o.forwardFailed,
		ModifyResponse: o.watchStream,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	o.wg.Add(1)
	go o.advertise()
	return o
}

// close stops the prober and the address refresh, and removes this
// gateway's address.
func (o *owners) close() {
	o.cancel()
	o.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), ownerOpTimeout)
	defer cancel()
	_ = o.rc.Del(ctx, o.peerKey(o.id)).Err()
}

func (o *owners) key(k string) string      { return o.prefix + k }
func (o *owners) peerKey(id string) string { return o.prefix + "peer:" + id }

// advertise keeps this gateway's address in Redis, for the gateways that
// fetch an upload held here (heldUpload).
func (o *owners) advertise() {
	defer o.wg.Done()
	t := time.NewTicker(peerAddrTTL / 4)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(o.ctx, ownerOpTimeout)
		err := o.rc.Set(ctx, o.peerKey(o.id), o.addr, peerAddrTTL).Err()
		cancel()
		if err != nil && o.ctx.Err() == nil {
			o.log.Warn("cluster: could not advertise this gateway's address", slog.Any("error", err))
		}
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lookupScript returns the owner of KEYS[1], refreshing its expiry;
// unowned and ARGV[3] == "1": claims it for ARGV[1].
var lookupScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return v
end
if ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
return false
`)

// releaseScript deletes KEYS[1] if it still holds ARGV[1].
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// owner returns who owns k, claiming it for this gateway when nobody does
// and claim is set; the zero record when nobody does. A Redis error is
// returned: the caller serves the request itself (as a single gateway).
func (o *owners) owner(ctx context.Context, k string, claim bool) (ownerRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, ownerOpTimeout)
	defer cancel()
	c := "0"
	if claim {
		c = "1"
	}
	v, err := lookupScript.Run(ctx, o.rc, []string{o.key(k)}, o.self, o.ttl.Milliseconds(), c).Text()
	if errors.Is(err, redis.Nil) {
		return ownerRecord{}, nil
	}
	if err != nil {
		return ownerRecord{}, fmt.Errorf("cluster: owner of a session: %w", err)
	}
	return parseOwner(v), nil
}

// release lets k go if rec still owns it, so that the key's next request
// binds it anew.
func (o *owners) release(k string, rec ownerRecord) {
	ctx, cancel := context.WithTimeout(o.ctx, ownerOpTimeout)
	defer cancel()
	if err := releaseScript.Run(ctx, o.rc, []string{o.key(k)}, rec.String()).Err(); err != nil && o.ctx.Err() == nil {
		o.log.Warn("cluster: could not release a lost gateway's session", slog.Any("error", err))
	}
}

// fromPeer reports whether r was forwarded by a gateway of the cluster.
// A request that claims to be and is not is refused by route.
func (o *owners) fromPeer(r *http.Request) (peer, forged bool) {
	v := r.Header.Get(peerHeader)
	if v == "" {
		return false, false
	}
	ok := subtle.ConstantTimeCompare([]byte(v), []byte(o.token)) == 1
	return ok, !ok
}

// userOwned serves h at the gateway that owns the request's signed-in
// user when sessions are sticky (pool.sticky_sessions) in a cluster: the
// user's Gradio session, and its gr.State, lives in one gateway only.
func (g *Gateway) userOwned(h http.HandlerFunc) http.HandlerFunc {
	o := g.owners()
	if o == nil || !g.cfg.Pool.StickySessions {
		return h
	}
	return o.route(apiDoor, func(r *http.Request) (string, bool) {
		u, err := pool.ParseUser(r.Header.Get(UserHeader))
		if err != nil || u == "" {
			return "", false // anonymous, or a bad header the handler answers
		}
		return "user:" + g.backend.UserTag(u), true
	}, h)
}

// ownedKey finds the key a request belongs to.
type ownedKey func(r *http.Request) (key string, claim bool)

// door is the shape a route's caller expects its errors in: the Gradio
// front door's ({"detail"}, and Gradio's unexpected_error on a stream) or
// the gateway's own API ({"error": {"code", "message"}}, and an error
// event on a stream).
type door int

const (
	gradioDoor door = iota
	apiDoor
)

// route wraps h: a request whose key another gateway owns is forwarded
// there; one this gateway owns (or claims now), or that has no key, or
// that a peer forwarded (never forwarded twice: no loop), is served by h.
func (o *owners) route(d door, keyOf ownedKey, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		peer, forged := o.fromPeer(r)
		if forged {
			writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: peerHeader + " is for the gateways of a cluster"})
			return
		}
		if peer {
			if addr := r.Header.Get(peerClientHeader); addr != "" {
				r.RemoteAddr = addr // limits and logs count the caller, not the peer
			}
			h(w, r)
			return
		}
		r.Header.Del(peerClientHeader)
		k, claim := keyOf(r)
		if k == "" {
			h(w, r)
			return
		}
		rec, err := o.owner(r.Context(), k, claim)
		if err != nil {
			// Redis lost: sessions are local until it answers (the
			// limits' own fail_open/fail_closed rule still holds).
			o.log.Debug("cluster: owner look-up failed; serving here", slog.Any("error", err))
			h(w, r)
			return
		}
		if rec.id == "" || rec.id == o.id {
			h(w, r)
			return
		}
		o.forward(w, r, d, k, claim, rec, h)
	}
}

// forwardKey carries a forwarded request's target to rewrite and its
// failure handlers.
type forwardKey struct{}

type forwarding struct {
	key    string
	rec    ownerRecord
	target *url.URL
	door   door
	stream bool // the caller waits for an event stream (a front-door GET)
	// claim and here: a request that binds an unowned key (a join) is
	// served here by here when its owner could not even be dialled.
	claim bool
	here  http.HandlerFunc
	in    *http.Request // the caller's request, as it reached this gateway
}

// forward sends r to rec's gateway and relays its answer.
func (o *owners) forward(w http.ResponseWriter, r *http.Request, d door, k string, claim bool, rec ownerRecord, here http.HandlerFunc) {
	fw := &forwarding{key: k, rec: rec, door: d, stream: d == gradioDoor && r.Method == http.MethodGet, claim: claim, here: here, in: r}
	target, err := url.Parse(rec.addr)
	if err != nil || target.Host == "" {
		o.answerLost(w, fw)
		return
	}
	fw.target = target
	p, lost := o.watch.begin(rec.addr)
	defer o.watch.end(p)
	if lost {
		o.answerLost(w, fw)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()
	ctx = context.WithValue(ctx, forwardKey{}, fw)
	addLog(r, slog.String("owner", rec.id))
	if r.Body != nil && r.Body != http.NoBody {
		// Full duplex: the owner may answer before the transport has read
		// the caller's body to its end (it checks for EOF once more after
		// the last byte, or the owner answers 413 early). Without it,
		// net/http's server consumes and closes the body as the answer's
		// header is written; the transport's next read of it then fails,
		// and it closes the connection the answer is still arriving on:
		// the caller got a 200 header and a cut body ("TypeError:
		// terminated" in the JS client; Go issue 40747).
		_ = http.NewResponseController(w).EnableFullDuplex()
		// And read what is left of the body before the handler returns,
		// as net/http would have before the answer: in full duplex its own
		// read comes after the handler, once it stopped watching the
		// connection, and reaching the body's end starts that watch again,
		// racing the read of the connection's next request ("invalid
		// concurrent Body.Read call": the caller's connection was reset).
		// Reading through r.Body lets bodyGuard see the end, so that it
		// does not time out the connection's watch either (that cancels
		// every later request on the connection).
		defer func() { _, _ = io.CopyN(io.Discard, r.Body, maxUnreadBody) }()
	}
	o.proxy.ServeHTTP(w, r.WithContext(ctx))
}

func (o *owners) rewrite(pr *httputil.ProxyRequest) {
	fw := pr.In.Context().Value(forwardKey{}).(*forwarding)
	pr.SetURL(fw.target)
	pr.Out.Host = pr.In.Host // the owner writes URLs for the host the caller used
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		if v, ok := pr.In.Header[h]; ok {
			pr.Out.Header[h] = v // as the caller's proxy sent them: the owner applies its own trust rules
		}
	}
	pr.Out.Header.Set(peerHeader, o.token)
	pr.Out.Header.Set(peerClientHeader, pr.In.RemoteAddr)
}

// forwardFailed answers a forwarded request that got no answer: the
// caller left (nothing to say), or the owner could not be dialled (lost),
// or the prober found it lost, or this one request failed (a connection
// cut: the owner may live; its prober decides).
func (o *owners) forwardFailed(w http.ResponseWriter, r *http.Request, err error) {
	fw := r.Context().Value(forwardKey{}).(*forwarding)
	if r.Context().Err() != nil && !o.watch.isLost(fw.rec.addr) {
		return // the caller went away
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		o.watch.markLost(fw.rec.addr) // nothing listens there
		if o.serveHere(w, fw) {
			return
		}
	}
	o.log.Warn("cluster: a request forwarded to the gateway owning its session failed", slog.String("owner", fw.rec.id),
		slog.Bool("owner_lost", o.watch.isLost(fw.rec.addr)), slog.Any("error", err))
	o.answerLost(w, fw)
}

// serveHere serves a binding request (a join) whose owner could not be
// dialled at this gateway instead, as a new session: it never reached
// the lost owner, so it cannot run twice. False when it cannot be (not a
// binding request, its body cannot be read again, or another gateway
// claimed the key meanwhile).
func (o *owners) serveHere(w http.ResponseWriter, fw *forwarding) bool {
	in := fw.in
	if !fw.claim || in.GetBody == nil || in.Context().Err() != nil {
		return false
	}
	o.release(fw.key, fw.rec)
	rec, err := o.owner(in.Context(), fw.key, true)
	if err != nil || rec.id != o.id {
		return false
	}
	body, err := in.GetBody()
	if err != nil {
		return false
	}
	in.Body = body
	o.log.Info("cluster: a join whose session's owner is lost binds it here", slog.String("lost_owner", fw.rec.id))
	fw.here(w, in)
	return true
}

// answerLost answers a forwarded request that failed, in its door's
// shape; when the owner is lost, the session's owner record is released
// so that its next request binds it at a live gateway.
func (o *owners) answerLost(w http.ResponseWriter, fw *forwarding) {
	if o.watch.isLost(fw.rec.addr) || fw.target == nil {
		o.release(fw.key, fw.rec)
	}
	switch {
	case fw.door == apiDoor:
		writeError(w, errOwnerLost())
	case fw.stream:
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(lostEvent(fw.door))
	default:
		detailError(w, http.StatusServiceUnavailable, ownerLostDetail)
	}
}

// errOwnerLost is the gateway API's answer when the gateway owning the
// caller's user is lost.
func errOwnerLost() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: "owner_lost", RetryAfter: 1,
		Message: "gradiopool: the gateway that held this user's session stopped answering; its calls in flight are lost and not run again; retry"}
}

// lostEvent is what a stream gets when its owner is lost. Through the
// front door: Gradio's unexpected_error, which the official clients report
// to every call of the stream, then close_stream, without which the JS
// client takes the stream for open and puts its next calls on it (they
// would never end). Through the gateway's API: its error event.
func lostEvent(d door) []byte {
	if d == apiDoor {
		b, _ := json.Marshal(map[string]*apiError{"error": errOwnerLost()})
		return append(append([]byte("event: error\ndata: "), b...), '\n', '\n')
	}
	b, _ := json.Marshal(map[string]any{"msg": "unexpected_error", "message": ownerLostDetail, "success": false})
	out := append(append([]byte("data: "), b...), '\n', '\n')
	return append(out, "data: {\"msg\":\"close_stream\",\"event_id\":null}\n\n"...)
}

// detailError writes Gradio's error shape {"detail": msg}.
func detailError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"detail": msg})
	_, _ = w.Write(b)
}

// watchStream makes an event stream from the owner end with lostEvent,
// not a cut connection, when the owner is lost in the middle of it.
func (o *owners) watchStream(resp *http.Response) error {
	fw := resp.Request.Context().Value(forwardKey{}).(*forwarding)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return nil
	}
	resp.Body = &streamTail{ReadCloser: resp.Body, lost: func() []byte {
		lost := o.watch.isLost(fw.rec.addr)
		if !lost && resp.Request.Context().Err() != nil {
			return nil // the caller went away
		}
		if lost {
			o.release(fw.key, fw.rec)
		}
		// Cut (the owner crashed, or the connection broke): its calls on
		// this stream are lost to the caller either way. Whether the
		// owner lives is for a dial or its prober to say.
		return lostEvent(fw.door)
	}}
	return nil
}

// streamTail ends a stream cut by a lost owner with the bytes lost gives
// (nil: the cut is passed on).
type streamTail struct {
	io.ReadCloser
	lost func() []byte
	tail *bytes.Reader
}

func (s *streamTail) Read(p []byte) (int, error) {
	if s.tail != nil {
		return s.tail.Read(p)
	}
	n, err := s.ReadCloser.Read(p)
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	b := s.lost()
	if b == nil {
		return n, err
	}
	s.tail = bytes.NewReader(b)
	if n > 0 {
		return n, nil
	}
	return s.tail.Read(p)
}

// heldUpload fetches an upload another gateway of the cluster holds
// (frontdoor.Config.FetchUpload).
func (o *owners) heldUpload(ctx context.Context, home, id string) (io.ReadCloser, error) {
	octx, cancel := context.WithTimeout(ctx, ownerOpTimeout)
	addr, err := o.rc.Get(octx, o.peerKey(home)).Result()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("cluster: where gateway %s is: %w", home, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+peerUploadPath+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(peerHeader, o.token)
	resp, err := o.fetch.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cluster: fetching an upload from gateway %s: %w", home, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("cluster: fetching an upload from gateway %s: %w (%d)", home, frontdoor.ErrUploadNotFound, resp.StatusCode)
	}
	return resp.Body, nil
}

// peerUploadPath serves this gateway's held uploads to its peers.
const peerUploadPath = "/_gradiopool/peer/upload/"

// handlePeerUpload is GET peerUploadPath{id}, for peers only.
func (o *owners) handlePeerUpload(fd *frontdoor.FrontDoor) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if peer, _ := o.fromPeer(r); !peer {
			writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "for the gateways of a cluster only"})
			return
		}
		rc, err := fd.OpenUpload(r.PathValue("id"))
		if err != nil {
			writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no such upload"})
			return
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.Copy(w, rc)
	}
}

// peerWatch tells lost gateways: a gateway with forwarded requests in
// flight is probed (GET /healthz) every ownerProbeEvery; after
// ownerProbeMisses misses, or a failed dial, it is lost: its forwarded
// requests end and, for ownerLostFor, new ones are answered at once.
type peerWatch struct {
	ctx    context.Context
	client *http.Client
	wg     *sync.WaitGroup

	mu    sync.Mutex // guards peers; nothing slow runs under it
	peers map[string]*peerState
	// onLost runs once each time a peer is taken for lost.
	onLost func(addr string)
}

// peerState is one peer gateway while requests are forwarded to it or it
// is taken for lost.
type peerState struct {
	addr      string
	ctx       context.Context // ended when the peer is found lost
	cancel    context.CancelFunc
	inFlight  int
	lostUntil time.Time
}

func newPeerWatch(ctx context.Context, c *http.Client, wg *sync.WaitGroup, onLost func(addr string)) *peerWatch {
	return &peerWatch{ctx: ctx, client: c, wg: wg, peers: map[string]*peerState{}, onLost: onLost}
}

// begin counts a forwarded request to addr until end; lost: addr was
// found lost in the last ownerLostFor.
func (pw *peerWatch) begin(addr string) (p *peerState, lost bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	p = pw.peers[addr]
	now := time.Now()
	if p != nil && !p.lostUntil.IsZero() {
		if now.Before(p.lostUntil) {
			p.inFlight++
			return p, true
		}
		delete(pw.peers, addr) // lost long enough ago: ask again
		p = nil
	}
	if p == nil {
		p = &peerState{addr: addr}
		p.ctx, p.cancel = context.WithCancel(pw.ctx)
		pw.peers[addr] = p
		pw.wg.Add(1)
		go pw.probe(p)
	}
	p.inFlight++
	return p, false
}

// end ends a request begin counted.
func (pw *peerWatch) end(p *peerState) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	p.inFlight--
}

func (pw *peerWatch) isLost(addr string) bool {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	p := pw.peers[addr]
	return p != nil && !p.lostUntil.IsZero()
}

// markLost takes addr for lost: its forwarded requests end.
func (pw *peerWatch) markLost(addr string) {
	pw.mu.Lock()
	p := pw.peers[addr]
	first := p != nil && p.lostUntil.IsZero()
	if first {
		p.lostUntil = time.Now().Add(ownerLostFor)
	}
	pw.mu.Unlock()
	if p != nil {
		p.cancel()
	}
	if first && pw.onLost != nil {
		pw.onLost(addr)
	}
}

// probe asks p's health while requests are forwarded to it; it stops
// when none is left (the state is dropped), when p is lost, or at close.
func (pw *peerWatch) probe(p *peerState) {
	defer pw.wg.Done()
	t := time.NewTicker(ownerProbeEvery)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		pw.mu.Lock()
		idle := p.inFlight == 0
		if idle {
			delete(pw.peers, p.addr)
		}
		pw.mu.Unlock()
		if idle {
			p.cancel()
			return
		}
		if pw.healthy(p) {
			misses = 0
			continue
		}
		if misses++; misses >= ownerProbeMisses {
			pw.markLost(p.addr)
			return
		}
	}
}

func (pw *peerWatch) healthy(p *peerState) bool {
	req, err := http.NewRequestWithContext(p.ctx, http.MethodGet, p.addr+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := pw.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
