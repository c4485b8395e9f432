package pool_test

import (
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

func TestPredictBasic(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	ctx := ctxT(t)
	res, err := p.Predict(ctx, "alice@example.com", "/upper", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if got := str(t, res.Data[0]); got != "HELLO" {
		t.Errorf("upper = %q", got)
	}
	if res.Replica == "" || res.Attempts != 1 {
		t.Errorf("Result = %+v", res)
	}
	st := p.Stats(t.Context())
	if !st.Initialized || st.UserAssignments != 1 {
		t.Errorf("Stats = %+v", st)
	}
}
