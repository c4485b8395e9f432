package gradio_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// holdApp has one endpoint, "hold", that runs until release is closed (or
// its call is cancelled).
func holdApp(release <-chan struct{}) *gradiotest.App {
	app := gradiotest.NewApp()
	app.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s, err := c.String(0)
		return []any{s}, err
	}, nil, nil)
	return app
}

func TestJobAfterDone(t *testing.T) {
	tests := []struct {
		name string
		// end makes the held job finish; want is the error Wait then returns
		// (nil: completed).
		end  func(cancel context.CancelFunc, release chan struct{}, j *gradio.Job)
		want error
	}{
		{"completed", func(_ context.CancelFunc, release chan struct{}, _ *gradio.Job) { close(release) }, nil},
		{"submit ctx ended", func(cancel context.CancelFunc, _ chan struct{}, _ *gradio.Job) { cancel() }, context.Canceled},
		{"cancelled", func(_ context.CancelFunc, _ chan struct{}, j *gradio.Job) {
			if err := j.Cancel(context.Background()); err != nil {
				t.Errorf("Cancel: %v", err)
			}
		}, gradio.ErrCanceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := startSim(t, gradiotest.Gradio5, holdApp(release), nil)
			c := connect(t, srv.URL)
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			j, err := c.Submit(ctx, "hold", "x")
			if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			ran := make(chan bool, 1)
			j.AfterDone(func() {
				select {
				case <-j.Done():
					ran <- true
				default:
					ran <- false // must not happen: f runs only once the job has finished
				}
			})
			stopped := j.AfterDone(func() { t.Error("a stopped AfterDone callback ran") })
			if !stopped() {
				t.Fatal("stop before the job finished = false, want true")
			}
			if stopped() {
				t.Error("second stop = true, want false")
			}
			tt.end(cancel, release, j)
			select {
			case done := <-ran:
				if !done {
					t.Error("AfterDone callback ran before Done was closed")
				}
			case <-testCtx(t).Done():
				t.Fatal("AfterDone callback did not run")
			}
			if _, err := j.Wait(context.Background()); !errors.Is(err, tt.want) {
				t.Errorf("Wait: %v, want %v", err, tt.want)
			}

			// Registered after the end: runs at once; stop is too late.
			late := make(chan struct{})
			stop := j.AfterDone(func() { close(late) })
			select {
			case <-late:
			case <-testCtx(t).Done():
				t.Fatal("late AfterDone callback did not run")
			}
			if stop() {
				t.Error("stop after the job finished = true, want false")
			}
			select {
			case <-release:
			default:
				close(release)
			}
		})
	}
}
