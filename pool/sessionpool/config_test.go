package sessionpool_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

func TestNewValidates(t *testing.T) {
	connect := func(context.Context) (int, error) { return 1, nil }
	tests := []struct {
		name    string
		cfg     sessionpool.Config[int]
		wantErr string
		min     int
		max     int
		waiters int
	}{
		{name: "zero value but Connect", cfg: sessionpool.Config[int]{Connect: connect}, min: 5, max: 50, waiters: 1000},
		{name: "no Connect", cfg: sessionpool.Config[int]{}, wantErr: "Connect is nil"},
		{name: "negative max", cfg: sessionpool.Config[int]{Connect: connect, MaxSessions: -1}, wantErr: "negative"},
		{name: "min above max", cfg: sessionpool.Config[int]{Connect: connect, MinSessions: 9, MaxSessions: 3}, wantErr: "exceeds"},
		{name: "default min clamped to small max", cfg: sessionpool.Config[int]{Connect: connect, MaxSessions: 3}, min: 3, max: 3, waiters: 1000},
		{name: "negative min is none", cfg: sessionpool.Config[int]{Connect: connect, MinSessions: -1}, min: 0, max: 50, waiters: 1000},
		{name: "unbounded waiters", cfg: sessionpool.Config[int]{Connect: connect, MaxWaiters: -5}, min: 5, max: 50, waiters: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := sessionpool.New(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			st := p.Stat()
			if st.MinSessions != tt.min || st.MaxSessions != tt.max || st.MaxWaiters != tt.waiters {
				t.Errorf("min/max/waiters = %d/%d/%d, want %d/%d/%d", st.MinSessions, st.MaxSessions, st.MaxWaiters, tt.min, tt.max, tt.waiters)
			}
		})
	}
}

func TestAcquireFuncReleasesOnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		boom := errors.New("boom")
		for range 3 { // would block on the second round if not released
			if err := p.AcquireFunc(context.Background(), func(*fakeConn) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("AcquireFunc = %v", err)
			}
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestWarmConnectsMinWithoutAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		p := newPool(t, b.config())
		p.Warm()
		p.Warm()
		synctest.Wait()
		if st := p.Stat(); st.Idle != 5 || st.AcquireCount != 0 || !st.Initialized {
			t.Errorf("stat = %+v", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestLogger checks that events reach the slog.Logger, failures at Warn,
// and that session values never appear.
func TestLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			if n == 1 {
				time.Sleep(time.Second) // fail once the caller waits for it
				return errors.New("refused")
			}
			return nil
		}}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		p := newPool(t, cfg)
		if _, err := p.Acquire(context.Background()); err == nil {
			t.Fatal("first Acquire succeeded, want the connect error")
		}
		time.Sleep(time.Minute) // back-off refill
		s := mustAcquire(t, p)
		s.Destroy()
		synctest.Wait()
		closePool(t, p)
		out := buf.String()
		for _, want := range []string{
			"level=WARN msg=\"sessionpool: connect_failed\"", "err=refused",
			"msg=\"sessionpool: init\"", "msg=\"sessionpool: connected\"",
			"level=WARN msg=\"sessionpool: destroyed\"", "reason=error", "msg=\"sessionpool: closed\"",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "fakeConn") {
			t.Errorf("log shows a session value:\n%s", out)
		}
	})
}

func TestEventKindAndReasonStrings(t *testing.T) {
	for k := sessionpool.EventInit; k <= sessionpool.EventClosed; k++ {
		if s := k.String(); s == "unknown" || s == "" {
			t.Errorf("EventKind(%d) has no name", k)
		}
	}
	for r := sessionpool.ReasonIdle; r <= sessionpool.ReasonClosed; r++ {
		if s := r.String(); s == "unknown" || s == "" {
			t.Errorf("Reason(%d) has no name", r)
		}
	}
	if s := sessionpool.EventKind(200).String(); s != "unknown" {
		t.Errorf("EventKind(200) = %q", s)
	}
}
