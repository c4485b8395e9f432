package pool_test

import (
	"errors"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestSlowReaderIsNotTheReplicasError: a call whose Events reader falls
// too far behind fails with gradio.ErrSlowReader, the caller's doing: the
// replica is charged no error (errors count toward its ejection). Before,
// each such call counted as an error of the healthy replica (make abuse's
// row 11: 4 of 4).
func TestSlowReaderIsNotTheReplicasError(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	srv := gradiotest.NewServer(gradiotest.NewFlood(40, 1<<20, gate).App())
	defer srv.Close()
	p := newPool(t, pool.Config{Replicas: []string{srv.URL}})
	ctx := ctxT(t)
	c, err := p.Submit(ctx, "", "flood", 0)
	if err != nil {
		t.Fatal(err)
	}
	events := c.Events() // a reader that takes nothing
	if _, err := c.Wait(ctx); !errors.Is(err, gradio.ErrSlowReader) {
		t.Fatalf("Wait: %v, want ErrSlowReader", err)
	}
	for range events {
	}
	<-c.Done()
	if st := p.Stats(ctx); st.Errors != 0 {
		t.Errorf("the replica was charged %d errors for a slow reader", st.Errors)
	}
}
