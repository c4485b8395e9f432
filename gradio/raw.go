package gradio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
)

// URL returns the URL of the app route p under its API prefix:
// "{base}{api_prefix}/{p}" ("https://h/gradio_api/queue/join" for Gradio 5).
// It is for callers that speak the protocol themselves, such as a gateway
// relaying the Gradio protocol of its callers.
func (c *Client) URL(p string) string { return c.app.api(p) }

// NewRequest builds a request to u (usually from [Client.URL]) carrying what
// every request of this client carries: the Hugging Face token, the headers
// of WithHeader and the user agent. Cookies (login) are added by
// [Client.Do]. The caller may change the headers before sending it.
func (c *Client) NewRequest(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	return c.app.newRequest(ctx, method, u, body)
}

// Do sends req with the app's tuned transport and login cookies. With
// headerTimeout the wait for the response headers is bounded by the
// client's header time-out (never the body: streams are not cut). The
// caller must close the response body.
func (c *Client) Do(req *http.Request, headerTimeout bool) (*http.Response, error) {
	return c.app.do(req, headerTimeout)
}

// DoWhileAlive is Do for a request the app may answer late while it makes
// progress: an app short of threads (Gradio's max_threads) answers a join,
// or opens a new session's stream, only once a thread is free, and a join
// it answers late is still queued. The header time-out counts from the
// app's last sign of life, the sending of req or a message on any of its
// streams ([Client.NoteStreamMessage] counts too), so the wait goes on
// while the app's calls stream and ends a time-out after they stop.
func (c *Client) DoWhileAlive(req *http.Request) (*http.Response, error) {
	return c.app.doWhileAlive(req)
}

// Reach opens a TCP connection to the app's host and closes it at once: a
// liveness check that sends no request, so it can neither wake a sleeping
// Space nor queue anything, and costs the app nothing. It fails when
// nothing listens there (a process that died: "connection refused") or the
// host does not answer the connect; it cannot see a process that accepts
// connections but is hung (use [Client.Ping] for that). It returns an error
// wrapping [errors.ErrUnsupported] when it cannot dial the way the app's
// requests do (an HTTP proxy, a transport given by WithHTTPClient that is
// not an *http.Transport); a failure to connect is a *ConnectError.
func (c *Client) Reach(ctx context.Context) error {
	a := c.app
	u, err := url.Parse(a.base)
	if err != nil {
		return &ConnectError{Src: a.src, Err: err}
	}
	dial := (&net.Dialer{Timeout: defaultDialTimeout}).DialContext
	switch t := a.hc.Transport.(type) {
	case nil:
	case *http.Transport:
		if t.Proxy != nil {
			if pu, err := t.Proxy(&http.Request{URL: u}); err != nil || pu != nil {
				return fmt.Errorf("gradio: reach %s: requests go through a proxy: %w", u.Host, errors.ErrUnsupported)
			}
		}
		if t.DialContext != nil {
			dial = t.DialContext
		}
	default:
		return fmt.Errorf("gradio: reach %s: a transport of type %T: %w", u.Host, t, errors.ErrUnsupported)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	conn, err := dial(ctx, "tcp", host)
	if err != nil {
		return &ConnectError{Src: a.src, Err: err}
	}
	return conn.Close()
}
