package sessionpool_test

import (
	"context"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
	"github.com/jackc/puddle/v2"
)

// benchImpl adapts a pool implementation to the benchmark: setup returns a
// loop doing n acquire+release pairs, and a clean-up.
type benchImpl struct {
	name  string
	setup func(b *testing.B, size int) (loop func(n int), done func())
}

var benchImpls = []benchImpl{
	{"gradiopool", func(b *testing.B, size int) (func(int), func()) {
		p, err := sessionpool.New(sessionpool.Config[int]{
			Connect:     func(context.Context) (int, error) { return 1, nil },
			MinSessions: 1,
			MaxSessions: size,
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		warm := make([]*sessionpool.Session[int], size)
		for i := range warm {
			if warm[i], err = p.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, s := range warm {
			s.Release()
		}
		loop := func(n int) {
			for range n {
				s, err := p.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				s.Release()
			}
		}
		return loop, func() { p.Close(ctx) }
	}},
	{"puddle", func(b *testing.B, size int) (func(int), func()) {
		p, err := puddle.NewPool(&puddle.Config[int]{
			Constructor: func(context.Context) (int, error) { return 1, nil },
			Destructor:  func(int) {},
			MaxSize:     int32(size),
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		warm := make([]*puddle.Resource[int], size)
		for i := range warm {
			if warm[i], err = p.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, r := range warm {
			r.Release()
		}
		loop := func(n int) {
			for range n {
				r, err := p.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				r.Release()
			}
		}
		return loop, p.Close
	}},
}

// BenchmarkAcquireRelease compares this pool with jackc/puddle/v2 on the
// same loop: 1 goroutine (uncontended), 50 goroutines on 50 sessions, and
// 500 goroutines on 50 sessions (450 always waiting). Run both in one
// process, on an otherwise quiet machine, and compare ratios:
//
//	go test -run '^$' -bench BenchmarkAcquireRelease -benchmem -count 3 ./pool/sessionpool/
func BenchmarkAcquireRelease(b *testing.B) {
	cases := []struct {
		name             string
		goroutines, size int
	}{
		{"1", 1, 50},
		{"50", 50, 50},
		{"500on50", 500, 50},
	}
	for _, impl := range benchImpls {
		b.Run(impl.name, func(b *testing.B) {
			for _, c := range cases {
				b.Run(c.name, func(b *testing.B) {
					loop, done := impl.setup(b, c.size)
					defer done()
					b.ReportAllocs()
					b.ResetTimer()
					var wg sync.WaitGroup
					for g := range c.goroutines {
						n := b.N / c.goroutines
						if g < b.N%c.goroutines {
							n++
						}
						wg.Go(func() { loop(n) })
					}
					wg.Wait()
				})
			}
		})
	}
}
