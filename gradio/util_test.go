package gradio_test

import (
	"errors"
	"net/http"
	"testing"
)

func asErr[T any](err error, target *T) bool { return errors.As(err, target) }

// proxyTransport is a test proxy's own transport, whose idle connections
// are closed at the end of the test (so goleak sees no readLoop left).
func proxyTransport(t testing.TB) *http.Transport {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}
