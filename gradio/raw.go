package gradio

import (
	"context"
	"io"
	"net/http"
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
