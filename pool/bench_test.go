package pool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// BenchmarkAcquireRelease measures the routing and pooling overhead of one
// Acquire/Release (no call): user key, assignment look-up and refresh,
// session hand-out.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name  string
		users int // 0 = anonymous
	}{{"anonymous", 0}, {"1000users", 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			var urls []string
			for range 3 {
				s := gradiotest.NewServer(nil)
				defer s.Close()
				urls = append(urls, s.URL)
			}
			p, err := pool.New(pool.Config{Replicas: urls, MinConnections: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			ctx := context.Background()
			if _, err := p.Predict(ctx, "", "upper", "warm"); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					u := ""
					if tc.users > 0 {
						u = fmt.Sprint("user", n.Add(1)%int64(tc.users), "@example.com")
					}
					l, err := p.Acquire(ctx, u)
					if err != nil {
						b.Error(err)
						return
					}
					l.Release()
				}
			})
		})
	}
}

// BenchmarkPredict measures a full call through the pool against a local
// simulated replica (loopback HTTP, Gradio's SSE protocol).
func BenchmarkPredict(b *testing.B) {
	s := gradiotest.NewUnstartedServer(nil)
	s.DefaultConcurrencyLimit = -1
	s.Start()
	defer s.Close()
	p, err := pool.New(pool.Config{Replicas: []string{s.URL}, MinConnections: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Predict(ctx, "bench@example.com", "upper", "x"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
