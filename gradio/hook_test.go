package gradio_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// kindRecorder is an EventHook that keeps the kinds it saw.
type kindRecorder struct {
	mu    sync.Mutex
	kinds []gradio.EventKind
}

func (r *kindRecorder) hook(ev gradio.Event) {
	r.mu.Lock()
	r.kinds = append(r.kinds, ev.Kind)
	r.mu.Unlock()
}

func (r *kindRecorder) get() []gradio.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.kinds)
}

func TestEventHook(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	c := connect(t, srv.URL)
	t.Run("submit generator", func(t *testing.T) {
		var rec kindRecorder
		j, err := c.SubmitWith(testCtx(t), gradio.SubmitOptions{Hook: rec.hook}, "count", 3)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		got := rec.get()
		outputs := 0
		for _, k := range got {
			if k == gradio.EventOutput {
				outputs++
			}
		}
		if !slices.Contains(got, gradio.EventStarted) || outputs != 3 || got[len(got)-1] != gradio.EventCompleted {
			t.Fatalf("hook saw %v; want started, 3 outputs, completed last", got)
		}
		if i, k := slices.Index(got, gradio.EventStarted), slices.Index(got, gradio.EventOutput); i > k {
			t.Fatalf("hook saw %v: an output before started", got)
		}
	})
	t.Run("predict keeps no events but calls the hook", func(t *testing.T) {
		var rec kindRecorder
		if _, err := gradio.PredictWithHook(testCtx(t), c, rec.hook, "upper", "x"); err != nil {
			t.Fatal(err)
		}
		got := rec.get()
		if len(got) == 0 || got[len(got)-1] != gradio.EventCompleted {
			t.Fatalf("hook saw %v; want completed last", got)
		}
	})
	t.Run("app error", func(t *testing.T) {
		var rec kindRecorder
		_, err := gradio.PredictWithHook(testCtx(t), c, rec.hook, "fail", "x")
		var appErr *gradio.AppError
		if !errors.As(err, &appErr) {
			t.Fatalf("err = %v, want *AppError", err)
		}
		got := rec.get()
		if len(got) == 0 || got[len(got)-1] != gradio.EventError {
			t.Fatalf("hook saw %v; want error last", got)
		}
	})
	t.Run("no hook", func(t *testing.T) {
		// A context without a hook changes nothing.
		type otherKey struct{}
		if _, err := c.Predict(context.WithValue(testCtx(t), otherKey{}, 1), "upper", "x"); err != nil {
			t.Fatal(err)
		}
	})
}
