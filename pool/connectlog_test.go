package pool_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// TestUnreachableLogsFollowBackoff: a replica that never connects, at the
// default settings, is tried by the background prober along its ejection
// back-off (1 s doubling to a minute), not every ProbeInterval: over an
// hour of the bubble's clock its connect attempts come in rounds whose
// gaps grow to the back-off's maximum, and the warnings (one per attempt,
// and one per ejection) number about a hundred rounds' worth at most, not
// the ~7 000 a round every 2 s would log.
func TestUnreachableLogsFollowBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pn := newPipeNet()
		var logs bytes.Buffer
		var mu sync.Mutex
		var rounds []time.Time // the first failed attempt of each round
		hc := pn.httpClient()
		p, err := pool.New(pool.Config{
			Replicas:      []string{"http://127.0.0.1:29999"}, // nothing listens there
			ClientOptions: []gradio.Option{gradio.WithHTTPClient(hc)},
			Logger:        slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelWarn})),
			OnEvent: func(e pool.Event) {
				if e.Kind != pool.EventConnectFailed {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if e.Attempt == 1 { // a round's first attempt; its retries follow within seconds
					rounds = append(rounds, e.Time)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		p.Warm()
		time.Sleep(time.Hour)
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		lines := strings.Count(logs.String(), "\n")
		if len(rounds) < 10 {
			t.Fatalf("only %d connect rounds in an hour: the replica is not retried", len(rounds))
		}
		if len(rounds) > 75 { // 1+2+4+...+32 s, then one a minute: about 65
			t.Errorf("%d connect rounds in an hour, want the back-off's (at most 75)", len(rounds))
		}
		var gaps []time.Duration
		for i := 1; i < len(rounds); i++ {
			gaps = append(gaps, rounds[i].Sub(rounds[i-1]).Round(time.Second))
		}
		if gaps[len(gaps)-1] < 50*time.Second || gaps[0] > 10*time.Second {
			t.Errorf("gaps between connect rounds %v...: want them growing from seconds to the back-off's minute", gaps[:min(len(gaps), 12)])
		}
		if lines > 6*75 {
			t.Errorf("%d warning lines in an hour, want at most %d (attempts per round, plus the ejection, per round):\n%s", lines, 6*75, firstLines(logs.String(), 20))
		}
		t.Logf("an hour unreachable: %d rounds, %d warning lines; first gaps %v", len(rounds), lines, gaps[:min(len(gaps), 12)])
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}
