package gradio_test

// The Go client's protocol suite: every endpoint of the six-endpoint
// reference app, generator streams, gr.State, gr.Error, upload and
// download, keyword arguments, queue position events with Gradio's default
// concurrency_limit of 1, and cancel of running and queued jobs.
//
// In CI it runs against the simulator in every mode. With
// GRADIOPOOL_REAL_URL set to the URL of a real Gradio app serving the
// reference app (testdata/realgradio/app.py, any Gradio from 3.50 to 6.x)
// it runs against that app instead; `make test-real` does that for every
// URL in GRADIOPOOL_REAL_URLS and writes docs/COMPATIBILITY.md from the
// results. Subtest names are the feature names of that table.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

const envRealURL = "GRADIOPOOL_REAL_URL"

// suiteTarget is an app under test: its URL and how to turn real seconds
// into the slow endpoint's argument (the simulator runs on a compressed
// clock).
type suiteTarget struct {
	url     string
	seconds func(s float64) float64
}

func TestProtocolSuite(t *testing.T) {
	if u := os.Getenv(envRealURL); u != "" {
		t.Logf("against the real app at %s (%s)", u, envRealURL)
		runProtocolSuite(t, suiteTarget{url: u, seconds: func(s float64) float64 { return s }})
		return
	}
	// Gradio3WS is not in Modes (the other all-modes tests use routes
	// Gradio 3 lacks); the suite runs over it too.
	for _, mode := range append(slices.Clone(gradiotest.Modes), gradiotest.Gradio3WS) {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			scale := srv.TimeScale
			runProtocolSuite(t, suiteTarget{url: srv.URL, seconds: func(s float64) float64 { return s / scale }})
		})
	}
}

func runProtocolSuite(t *testing.T, tg suiteTarget) {
	real := os.Getenv(envRealURL) != ""
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := gradio.Connect(ctx, tg.url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close()
	t.Logf("Gradio %s, protocol %q", c.Config().Version, c.Config().Protocol)
	call := func(t *testing.T, c *gradio.Client, ep string, args ...any) []string {
		t.Helper()
		out, err := c.Predict(ctx, ep, args...)
		if err != nil {
			t.Fatalf("%s: %v", ep, err)
		}
		s := make([]string, len(out))
		for i, o := range out {
			s[i] = str(t, o)
		}
		return s
	}

	t.Run("predict", func(t *testing.T) {
		if got := call(t, c, "/upper", "hello gradio"); len(got) != 1 || got[0] != "HELLO GRADIO" {
			t.Errorf("upper = %q", got)
		}
		if got := call(t, c, "upper", "héllo ✓"); got[0] != "HÉLLO ✓" {
			t.Errorf("upper unicode = %q", got)
		}
	})
	t.Run("fn_index", func(t *testing.T) {
		if got := call(t, c, gradio.FnIndex(0), "by index"); got[0] != "BY INDEX" {
			t.Errorf("#0 = %q", got)
		}
	})
	t.Run("keyword_args", func(t *testing.T) {
		if got := call(t, c, "/upper", gradio.Kwargs{"text": "kw"}); got[0] != "KW" {
			t.Errorf("upper(text=kw) = %q", got)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		// count's n defaults to 5 (from /info).
		ai, err := c.APIInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ep := ai.Named["/count"]; ep == nil || len(ep.Parameters) != 1 || !ep.Parameters[0].HasDefault {
			t.Skip("this release's /info declares no parameter defaults (parameter_has_default): every argument must be given")
		}
		if got := call(t, c, "/count"); got[0] != "0 1 2 3 4" {
			t.Errorf("count() = %q", got)
		}
	})
	t.Run("generator_stream", func(t *testing.T) {
		j, err := c.Submit(ctx, "/count", 4)
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, j)
		if got := strings.Join(outputs(t, evs), "|"); got != "0|0 1|0 1 2|0 1 2 3" {
			t.Errorf("partial outputs %q", got)
		}
		last := evs[len(evs)-1]
		if last.Kind != gradio.EventCompleted || str(t, last.Data[0]) != "0 1 2 3" {
			t.Errorf("last event %v %s", last.Kind, last.Data)
		}
	})
	t.Run("slow", func(t *testing.T) {
		if got := call(t, c, "/slow", 0.05); !strings.HasPrefix(got[0], "slept ") {
			t.Errorf("slow = %q", got)
		}
	})
	t.Run("state", func(t *testing.T) {
		s1 := c.NewSession()
		defer s1.Close()
		call(t, s1, "/counter", "a")
		if got := call(t, s1, "/counter", "b"); got[0] != "2 items: a, b" {
			t.Errorf("second call on one session = %q", got)
		}
		s2 := c.NewSession()
		defer s2.Close()
		if got := call(t, s2, "/counter", "c"); got[0] != "1 items: c" {
			t.Errorf("fresh session = %q", got)
		}
	})
	t.Run("gr_error", func(t *testing.T) {
		_, err := c.Predict(ctx, "/fail", "boom")
		var ae *gradio.AppError
		if !errors.As(err, &ae) || ae.Message != "deliberate failure for input 'boom'" {
			t.Fatalf("err %v, want *AppError with the message", err)
		}
		if got := call(t, c, "/upper", "after error"); got[0] != "AFTER ERROR" {
			t.Errorf("after error = %q", got)
		}
	})
	t.Run("upload_download", func(t *testing.T) {
		payload := []byte{'h', 'i', 0, 0xff, 0xfe, '\n', 0x80, '1', '2', '3'}
		in := filepath.Join(t.TempDir(), "payload.bin")
		if err := os.WriteFile(in, payload, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := c.Predict(ctx, "/reverse_file", gradio.File(in))
		if err != nil {
			t.Fatal(err)
		}
		fd, err := gradio.ParseFileData(out[0])
		if err != nil {
			t.Fatalf("output %s: %v", out[0], err)
		}
		var got bytes.Buffer
		if err := c.Download(ctx, fd, &got); err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(payload)
		for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
			want[i], want[j] = want[j], want[i]
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("downloaded %x, want %x", got.Bytes(), want)
		}
	})
	t.Run("call_transport", func(t *testing.T) {
		// Gradio's REST shape (/call) as the transport (WithCallTransport;
		// also the automatic fallback when queue/join is unreachable).
		switch c.Config().Protocol {
		case gradio.ProtocolWS, gradio.ProtocolSSE, gradio.ProtocolSSEv1:
			t.Skipf("no /call routes before Gradio 4.20 (%s)", c.Config().Protocol)
		}
		rc, err := gradio.Connect(ctx, tg.url, gradio.WithCallTransport())
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if got := call(t, rc, "/upper", "rest"); got[0] != "REST" {
			t.Errorf("upper = %q", got)
		}
		j, err := rc.Submit(ctx, "/count", 3)
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, j)
		if got := strings.Join(outputs(t, evs), "|"); got != "0|0 1|0 1 2" {
			t.Errorf("partial outputs %q", got)
		}
		_, err = rc.Predict(ctx, "/fail", "boom")
		var ae *gradio.AppError
		if !errors.As(err, &ae) {
			t.Fatalf("fail: %v, want *AppError", err)
		}
		t.Logf("gr.Error through /call: %q (hidden %v)", ae.Message, ae.Hidden)
	})
	t.Run("cancel_running", func(t *testing.T) {
		s := c.NewSession()
		defer s.Close()
		jctx, jcancel := context.WithCancel(ctx)
		defer jcancel()
		j, err := s.Submit(jctx, "/slow", tg.seconds(3))
		if err != nil {
			t.Fatal(err)
		}
		waitKind(t, j, gradio.EventStarted)
		jcancel()
		if _, err := j.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: %v, want context.Canceled", err)
		}
		// The session stays usable. (Whether the app stopped the work at
		// once or only frees the slot when the function returns depends on
		// the release: see docs/COMPATIBILITY.md.)
		if got := call(t, s, "/upper", "after cancel"); got[0] != "AFTER CANCEL" {
			t.Errorf("after cancel = %q", got)
		}
		waitIdle(t, ctx, c)
	})
	t.Run("queue_and_cancel_queued", func(t *testing.T) {
		// slow runs one call at a time (Gradio's default
		// concurrency_limit=1): a second call waits in the queue and says
		// so (rank 0 of 1 or more); cancelled there it must never run.
		a, b := c.NewSession(), c.NewSession()
		defer a.Close()
		defer b.Close()
		actx, acancel := context.WithCancel(ctx)
		defer acancel()
		running, err := a.Submit(actx, "/slow", tg.seconds(4))
		if err != nil {
			t.Fatal(err)
		}
		waitKind(t, running, gradio.EventStarted)
		bctx, bcancel := context.WithCancel(ctx)
		defer bcancel()
		queued, err := b.Submit(bctx, "/slow", tg.seconds(2))
		if err != nil {
			t.Fatal(err)
		}
		ev := firstQueued(t, queued)
		if ev.Rank != 0 || ev.QueueSize < 1 {
			t.Errorf("queued event rank %d queue_size %d, want 0 and >= 1", ev.Rank, ev.QueueSize)
		}
		bcancel()
		if _, err := queued.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("queued Wait: %v", err)
		}
		// A probe on b's session joins behind the running call: if the
		// cancelled call were still queued it would be ahead (rank 1).
		probe, err := b.Submit(ctx, "/slow", 0)
		if err != nil {
			t.Fatal(err)
		}
		ev = firstQueued(t, probe)
		acancel()
		if _, err := probe.Wait(ctx); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if ev.Rank != 0 {
			msg := fmt.Sprintf("probe queued at rank %d (queue_size %d): the cancelled call is still in the app's queue and will run", ev.Rank, ev.QueueSize)
			if !real && !gradio.HangUpDropsQueued(c.Config()) {
				// The simulator reproduces the release's gap (see
				// gradio/cancel_queued.go); real apps report it as a failure.
				t.Skip("known gap of this release: " + msg)
			}
			t.Error(msg)
		}
	})
}

// firstQueued returns j's first EventQueued.
func firstQueued(t *testing.T, j *gradio.Job) gradio.Event {
	t.Helper()
	for ev := range j.Events() {
		switch ev.Kind {
		case gradio.EventQueued:
			return ev
		case gradio.EventStarted, gradio.EventCompleted, gradio.EventError:
			t.Fatalf("job %v (%v) before any queue position", ev.Kind, ev.Err)
		}
	}
	t.Fatal("no events")
	return gradio.Event{}
}

// waitIdle returns once a slow(0) call on a fresh session completes, i.e.
// nothing the test started still holds the slow endpoint.
func waitIdle(t *testing.T, ctx context.Context, c *gradio.Client) {
	t.Helper()
	s := c.NewSession()
	defer s.Close()
	if _, err := s.Predict(ctx, "/slow", 0); err != nil {
		t.Fatalf("idle probe: %v", err)
	}
}
