package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// bodyGuard bounds the time a request body may take, on every route, and
// makes sure an answer written before the body was read is actually sent.
//
// net/http reads what is left of a body (up to 256 KiB) before it writes
// the answer, so that the connection can be reused; with no read deadline a
// client that trickles its body (Content-Length: 1000, then a byte a second)
// holds the answer back forever. The gateway has no ReadTimeout on purpose
// (it would also cancel 10-minute calls: net/http's background read hits it
// and cancels the request's context), so the body gets a phase deadline of
// its own: set when the request arrives, cleared once the body was read to
// its end, and moved to now when the handler returns with the body unread,
// so that net/http gives up on it at once, answers, and closes the
// connection.
type bodyGuard struct {
	body io.ReadCloser
	rc   *http.ResponseController
	eof  atomic.Bool // the body was read to its end
}

// maxUnreadBody is how much of a body nobody read net/http reads after
// an answer to keep the connection (its own bound, 256 KiB); past it the
// connection is closed instead.
const maxUnreadBody = 256 << 10

// guardBody installs the guard on r (a request with a body) and returns
// it; done must be called when the handler returned.
func guardBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) *bodyGuard {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	g := &bodyGuard{body: r.Body, rc: http.NewResponseController(w)}
	_ = g.rc.SetReadDeadline(time.Now().Add(timeout))
	r.Body = g
	return g
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	n, err := g.body.Read(p)
	if errors.Is(err, io.EOF) && !g.eof.Swap(true) {
		// Read in full: from here on the connection's reads only watch
		// for the caller going away, which must not time out.
		_ = g.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (g *bodyGuard) Close() error { return g.body.Close() }

// done ends the body phase after the handler: an unread body is dropped
// and its connection closed after the answer instead of read to its end.
func (g *bodyGuard) done() {
	if g == nil || g.eof.Load() {
		return
	}
	_ = g.rc.SetReadDeadline(time.Now())
}

// bodyTimedOut reports whether err is the body's read deadline passing.
func bodyTimedOut(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
