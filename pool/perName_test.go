package pool_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// TestUnknownEndpointsRecordNothing (issue 33): calls to made-up endpoint
// names fail with gradio.ErrUnknownEndpoint and leave no trace: no
// per-endpoint row in the stats, no user assignment, no error counted.
func TestUnknownEndpointsRecordNothing(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	ctx := ctxT(t)
	if _, err := p.Predict(ctx, user(0), "upper", "x"); err != nil {
		t.Fatal(err)
	}
	p.Warm()
	before := p.Stats(ctx)
	for i := range 2000 {
		_, err := p.Predict(ctx, user(i+1), fmt.Sprintf("made-up-%d", i), "x")
		if !errors.Is(err, gradio.ErrUnknownEndpoint) {
			t.Fatalf("call %d to a made-up name: %v, want ErrUnknownEndpoint", i, err)
		}
	}
	after := p.Stats(ctx)
	if after.UserAssignments != before.UserAssignments {
		t.Errorf("user assignments %d -> %d after calls to made-up names", before.UserAssignments, after.UserAssignments)
	}
	if after.Errors != before.Errors || after.Calls != before.Calls {
		t.Errorf("calls/errors %d/%d -> %d/%d", before.Calls, before.Errors, after.Calls, after.Errors)
	}
	for name, rs := range after.Pools {
		for ep := range rs.Endpoints {
			if ep != "upper" {
				t.Errorf("replica %s has a stats row for endpoint %q", name, ep)
			}
		}
	}
}

// TestMaxUserAssignments (issue 33): many distinct users keep at most
// MaxUserAssignments assignments (rounded up to the store's 64 shards);
// the others were evicted, counted in Stats and UsersEvicted. With sticky
// sessions the users' own sessions are bounded the same way.
func TestMaxUserAssignments(t *testing.T) {
	for _, sticky := range []bool{false, true} {
		t.Run(fmt.Sprint("sticky=", sticky), func(t *testing.T) {
			srvs := replicas(t, 2)
			const limit = 64
			p := newPool(t, pool.Config{Replicas: urls(srvs), MaxUserAssignments: limit, StickySessions: sticky})
			ctx := ctxT(t)
			const users = 600
			for i := range users {
				if _, err := p.Predict(ctx, user(i), "upper", "x"); err != nil {
					t.Fatal(err)
				}
			}
			st := p.Stats(ctx)
			if st.UserAssignments > limit {
				t.Errorf("%d assignments after %d users, bound %d", st.UserAssignments, users, limit)
			}
			if sticky && st.StickySessions > limit {
				t.Errorf("%d sticky sessions after %d users, bound %d", st.StickySessions, users, limit)
			}
			if st.UserAssignmentsEvicted != p.UsersEvicted() || p.UsersEvicted() < users-limit {
				t.Errorf("evicted: stats %d, UsersEvicted %d; want at least %d", st.UserAssignmentsEvicted, p.UsersEvicted(), users-limit)
			}
			// The last user is still assigned: the next call finds it.
			if _, err := p.Predict(ctx, user(users-1), "upper", "y"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
