package sessionpool_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

func TestAcquireReleaseReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		p := newPool(t, b.config())
		s := mustAcquire(t, p)
		id := s.ID()
		synctest.Wait() // the other four connects finish
		time.Sleep(time.Second)
		s.Release()
		s.Release() // harmless
		s2 := mustAcquire(t, p)
		if s2.ID() != id {
			t.Errorf("reused session %d, want MRU %d", s2.ID(), id)
		}
		st := p.Stat()
		if st.Total != 5 || st.InUse != 1 || st.Idle != 4 {
			t.Errorf("stat = %+v", st)
		}
		s2.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
		if _, err := p.Acquire(context.Background()); err != sessionpool.ErrPoolClosed {
			t.Errorf("Acquire after Close = %v", err)
		}
	})
}

func TestLazyMinServedByFirstReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			d := time.Minute
			if n == 3 {
				d = time.Second
			}
			time.Sleep(d)
			return nil
		}}
		p := newPool(t, b.config())
		synctest.Wait()
		if st := p.Stat(); b.created() != 0 || st.Connecting != 0 || st.Initialized {
			t.Fatalf("connected before first use: created %d, stat %+v", b.created(), st)
		}
		start := time.Now()
		s := mustAcquire(t, p)
		if d := time.Since(start); d != time.Second {
			t.Errorf("first Acquire served after %v, want 1s (the first ready of 5)", d)
		}
		if st := p.Stat(); st.Connecting != 4 || st.Total != 1 || !st.Initialized {
			t.Errorf("after first Acquire: %+v", st)
		}
		time.Sleep(time.Minute)
		if st := p.Stat(); st.Connecting != 0 || st.Total != 5 || st.Idle != 4 {
			t.Errorf("after a minute: %+v", st)
		}
		s.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestAcquireReleaseDoesNotAllocate: the uncontended path allocates
// nothing per call (Session handles come 64 to an allocation, which
// AllocsPerRun's integer average rounds away, as benchmem does).
func TestAcquireReleaseDoesNotAllocate(t *testing.T) {
	b := &backend{}
	p := newPool(t, b.config())
	defer closePool(t, p)
	mustAcquire(t, p).Release()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		s, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Release()
	})
	if allocs != 0 {
		t.Errorf("Acquire+Release allocates %v times per call", allocs)
	}
}
