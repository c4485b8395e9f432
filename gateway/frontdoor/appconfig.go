package frontdoor

// The reference app (the replica whose config the front door serves) and
// the /config, /info and /app_id routes, with URLs rewritten to the gateway.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/appshape"
)

// refConfig is the reference app whose config and /info the gateway serves.
type refConfig struct {
	app     *gradio.Client
	replica string
	info    map[string][]byte // /info bodies by query, for app
}

// reference returns the app whose config the front door serves: the
// first replica in pool order that connects and serves the reference app
// (see fingerprint.go).
func (f *FrontDoor) reference(ctx context.Context) (*gradio.Client, string, error) {
	if err := f.ensureReference(ctx); err != nil {
		return nil, "", err
	}
	var errs []error
	for _, n := range f.replicaNames() {
		app, err := f.p.App(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
			errs = append(errs, err)
			continue
		}
		if err := f.checkApp(n, app.Config()); err != nil {
			errs = append(errs, err)
			continue
		}
		return app, n, nil
	}
	// No connected replica serves the reference app any more.
	if cs := f.connected(); len(cs) > 0 {
		f.fps.adoptMu.Lock()
		f.adopt(cs, "no connected replica serves the old one any more")
		f.fps.adoptMu.Unlock()
		for _, n := range f.replicaNames() {
			if app := f.p.ConnectedApp(n); app != nil && f.checkApp(n, app.Config()) == nil {
				return app, n, nil
			}
		}
	}
	return nil, "", fmt.Errorf("no replica is connected: %w", errors.Join(errs...))
}

var appIDRe = regexp.MustCompile(`"app_id":\s*\d+`)

// handleConfig is GET /config: the replicas' config, with root and URLs
// pointing at the gateway as the caller reached it and the gateway's own
// app_id.
func (f *FrontDoor) handleConfig(w http.ResponseWriter, r *http.Request) {
	app, _, err := f.reference(r.Context())
	if err != nil {
		detail(w, http.StatusServiceUnavailable, "gradiopool: "+err.Error())
		return
	}
	if bridgedProtocol(app.Config().Protocol) {
		f.bridgeConfig(w, r, app)
		return
	}
	out := replaceRoots(app.Config().Raw, appRoots(app), f.root(r))
	out = appIDRe.ReplaceAll(out, []byte(`"app_id":`+strconv.FormatUint(f.appID, 10)))
	relayed(http.StatusOK, "application/json", out).writeTo(w)
}

// handleInfo is GET info: the reference replica's /info (cached per query
// string), URLs rewritten.
func (f *FrontDoor) handleInfo(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	app, replica, err := f.reference(ctx)
	if err != nil {
		detail(w, http.StatusServiceUnavailable, "gradiopool: "+err.Error())
		return
	}
	q := r.URL.RawQuery
	f.refMu.Lock()
	if f.ref.app != app {
		f.ref = refConfig{app: app, replica: replica, info: map[string][]byte{}}
	}
	body, ok := f.ref.info[q]
	f.refMu.Unlock()
	if !ok {
		u := app.URL("info")
		if q != "" {
			u += "?" + q
		}
		req, err := app.NewRequest(ctx, http.MethodGet, u, nil)
		if err != nil {
			detail(w, http.StatusInternalServerError, err.Error())
			return
		}
		f.callerHeaders(r, req.Header)
		resp, err := app.Do(req, true)
		if err != nil {
			detail(w, http.StatusBadGateway, "gradiopool: info: "+err.Error())
			return
		}
		rb, err := readSmall(resp)
		if err != nil || resp.StatusCode != http.StatusOK {
			relayed(resp.StatusCode, resp.Header.Get("Content-Type"), rb).writeTo(w)
			return
		}
		body = appshape.PresentInfo(rb, app.Config())
		f.refMu.Lock()
		if f.ref.app == app && len(f.ref.info) < 16 {
			f.ref.info[q] = body
		}
		f.refMu.Unlock()
	}
	relayed(http.StatusOK, "application/json", replaceRoots(body, appRoots(app), f.root(r))).writeTo(w)
}

// handleAppID is GET app_id: the gateway's own id, stable while it runs.
func (f *FrontDoor) handleAppID(w http.ResponseWriter, r *http.Request) {
	relayed(http.StatusOK, "application/json", []byte(`{"app_id":`+strconv.FormatUint(f.appID, 10)+`}`)).writeTo(w)
}

// root is the gateway's root URL as the caller reached it.
func (f *FrontDoor) root(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if f.conf().TrustForwarded {
		host := r.Host
		if p := firstValue(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := firstValue(r.Header.Get("X-Forwarded-Host")); h != "" && !strings.ContainsAny(h, "/\\ \"'<>") {
			host = h
		}
		return scheme + "://" + host
	}
	if f.conf().PublicURL != "" {
		return strings.TrimRight(f.conf().PublicURL, "/")
	}
	// The Host header is the caller's to choose: reflected, a name of the
	// caller's would be announced as the app's root (and in its file URLs)
	// to whoever gets this answer. Only the listen address and loopback
	// names are taken from it.
	if f.hostAllowed(r.Host) {
		return scheme + "://" + r.Host
	}
	f.hostWarn.Do(func() {
		f.log.Warn("front door: a request's Host is not the listen address: /config announces the listen address; set frontdoor.public_url to the address callers use",
			slog.String("listen", f.conf().ListenAddr))
	})
	return scheme + "://" + f.fallbackHost()
}

// hostAllowed reports whether host (a Host header) may be reflected: the
// listen address itself, or a loopback name or address (any port: only
// this machine reaches it).
func (f *FrontDoor) hostAllowed(host string) bool {
	if host == "" || strings.ContainsAny(host, "/\\ \"'<>@") {
		return false
	}
	if f.conf().ListenAddr != "" && strings.EqualFold(host, f.conf().ListenAddr) {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.Trim(name, "[]")
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// fallbackHost is the announced host when the Host header is not
// allowed: the listen address, a wildcard one as localhost.
func (f *FrontDoor) fallbackHost() string {
	h, port, err := net.SplitHostPort(f.conf().ListenAddr)
	if err != nil {
		return "localhost"
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = "localhost"
	}
	return net.JoinHostPort(h, port)
}

func firstValue(v string) string {
	if i := strings.IndexByte(v, ','); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}

// appRoots are the roots a replica writes into its answers: its base URL
// and the root it computed for the pool's connect.
func appRoots(app *gradio.Client) []string {
	roots := []string{strings.TrimRight(app.BaseURL(), "/")}
	if cr := strings.TrimRight(app.Config().Root, "/"); cr != "" && cr != roots[0] {
		roots = append(roots, cr)
	}
	return roots
}

// replaceRoots replaces every root string prefix in a JSON document with
// the gateway's root.
func replaceRoots(b []byte, roots []string, gw string) []byte {
	for _, rt := range roots {
		if rt == "" {
			continue
		}
		b = bytes.ReplaceAll(b, []byte(`"`+rt), []byte(`"`+gw))
		// code snippets embed the URL inside longer strings
		b = bytes.ReplaceAll(b, []byte(rt+"/"), []byte(gw+"/"))
	}
	return b
}
