package gradio_test

import (
	"context"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// BenchmarkPredictWarm measures one warm Predict round trip (queue/join +
// queue/data stream to close_stream) against gradiotest with an instant
// handler, on an already connected session.
func BenchmarkPredictWarm(b *testing.B) {
	app := gradiotest.NewApp()
	app.Handle("echo", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		s, err := c.String(0)
		return []any{s}, err
	}, nil, nil)
	srv := gradiotest.NewServer(app)
	defer srv.Close()
	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Predict(ctx, "echo", "warm-up"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Predict(ctx, "echo", "hello"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPredictWarmParallel runs warm Predicts from parallel sessions
// (one session per goroutine, as a pool does).
func BenchmarkPredictWarmParallel(b *testing.B) {
	app := gradiotest.NewApp()
	app.Handle("echo", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		s, err := c.String(0)
		return []any{s}, err
	}, nil, nil).ConcurrencyLimit = -1
	srv := gradiotest.NewServer(app)
	defer srv.Close()
	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		s := c.NewSession()
		defer s.Close()
		for pb.Next() {
			if _, err := s.Predict(ctx, "echo", "hello"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
