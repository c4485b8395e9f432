package gateway_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorJoinRightAfterCloseStream: a caller that calls one at a
// time reads its stream to close_stream, closes it and joins its next call
// at once. The next call belongs to its next stream: the end of the
// previous one must not count it as abandoned by its caller (it was
// counted client_closed and its slot freed while it ran, when the
// previous stream's handler saw its caller go before it saw its own end;
// the CI of 41b92f1 caught it in TestDashboardInChromium). The race is a
// matter of scheduling: several callers run many rounds so that, with the
// bug, it happens in nearly every run.
func TestFrontDoorJoinRightAfterCloseStream(t *testing.T) {
	var urls []string
	for range 2 {
		s := gradiotest.NewUnstartedServer(nil)
		s.DefaultConcurrencyLimit = -1
		s.Latency = 20 * time.Millisecond
		s.Start()
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	srv, g, _ := frontGatewayOver(t, urls, nil)
	upper, fail := fdtest.FnIndex(t, srv.URL, "upper"), fdtest.FnIndex(t, srv.URL, "fail")
	const callers, rounds = 6, 40
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range rounds {
				session := fmt.Sprintf("seq%d", c)
				if got, err := fdtest.CallErr(srv.URL, session, upper, "hi"); got != "HI" {
					t.Errorf("caller %d round %d: upper %q %v", c, i, got, err)
					return
				}
				id, err := fdtest.Join(srv.URL, session, fail, "x")
				if err != nil {
					t.Errorf("caller %d round %d: %v", c, i, err)
					return
				}
				if done, err := fdtest.Stream(srv.URL, session); err != nil || done[id] == nil || done[id]["success"] != false {
					t.Errorf("caller %d round %d: fail: %v %v", c, i, done, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var up, fl gateway.EndpointRow
	for _, e := range g.HistoryDoc(gateway.WindowRecent).Endpoints {
		switch e.Endpoint {
		case "upper":
			up = e
		case "fail":
			fl = e
		}
	}
	if want := uint64(callers * rounds); up.Calls != want || up.Errors != 0 || fl.Calls != want || fl.AppErrors != want || fl.Errors != 0 {
		t.Errorf("counted upper %d calls (%d errors), fail %d calls (%d app errors, %d errors); want %d calls each, no errors, every fail an app error",
			up.Calls, up.Errors, fl.Calls, fl.AppErrors, fl.Errors, want)
	}
	if n := testutil.CollectAndCount(g.Metrics().Registry(), "gradiopool_call_errors_total"); n != 0 {
		t.Errorf("%d call_errors_total series, want none", n)
	}
}
