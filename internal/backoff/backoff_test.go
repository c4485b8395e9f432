package backoff_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/internal/backoff"
)

func TestDelay(t *testing.T) {
	tests := []struct {
		name    string
		b       backoff.Backoff
		attempt int
		want    time.Duration
	}{
		{"zero value first", backoff.Backoff{}, 0, backoff.DefaultBase},
		{"doubles", backoff.Backoff{Base: time.Second, Max: time.Minute}, 3, 8 * time.Second},
		{"capped", backoff.Backoff{Base: time.Second, Max: 5 * time.Second}, 10, 5 * time.Second},
		{"huge attempt", backoff.Backoff{Base: time.Second, Max: time.Hour}, 1000, time.Hour},
		{"negative attempt", backoff.Backoff{Base: time.Second}, -2, time.Second},
		{"max below base", backoff.Backoff{Base: time.Second, Max: time.Millisecond}, 4, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Delay(tt.attempt); got != tt.want {
				t.Errorf("Delay(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestDelayJitter(t *testing.T) {
	b := backoff.Backoff{Base: time.Second, Max: time.Minute, Jitter: 0.5}
	for range 100 {
		d := b.Delay(2)
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("Delay(2) with jitter 0.5 = %v, want in [2s, 4s]", d)
		}
	}
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := backoff.Sleep(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != time.Minute {
			t.Errorf("slept %v, want 1m", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := backoff.Sleep(ctx, time.Hour); err != context.DeadlineExceeded {
			t.Errorf("Sleep with ended ctx = %v, want DeadlineExceeded", err)
		}
	})
}
