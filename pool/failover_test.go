package pool_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

func TestFailoverConnectTimeout(t *testing.T) {
	srvs := replicas(t, 1)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: []string{blackholeURL(t), srvs[0].URL}, OnEvent: rec.hook,
		ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(400 * time.Millisecond)}})
	dead := p.Replicas()[0]
	ctx := ctxT(t)
	res, err := p.Predict(ctx, "new@example.com", "upper", "x") // round robin starts at the dead one
	if err != nil {
		t.Fatal(err)
	}
	if res.Replica == dead || res.Attempts != 2 {
		t.Fatalf("Result = %+v, want the live replica at the second attempt", res)
	}
	// 1 attempt + DefaultConnectRetries retries, then the next replica.
	if n := rec.count(pool.EventConnectFailed, dead); n != 1+pool.DefaultConnectRetries {
		t.Errorf("%d connect attempts on the dead replica, want %d", n, 1+pool.DefaultConnectRetries)
	}
	st := p.Stats(t.Context()).Pools[dead]
	if st.State != pool.StateEjected || st.Failovers != 1 || st.LastError == "" {
		t.Errorf("dead replica stats = %+v", st)
	}
	// The user was re-pinned: the next call goes straight to the live one.
	res2, err := p.Predict(ctx, "new@example.com", "upper", "x")
	if err != nil || res2.Replica != res.Replica {
		t.Errorf("second call: %v, %v", res2, err)
	}
}

func TestFailoverMetadataErrorNoRetry(t *testing.T) {
	srvs := replicas(t, 2)
	srvs[0].FailNextConfigs(5)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook})
	name0 := p.Replicas()[0]
	res, err := p.Predict(ctxT(t), "u@example.com", "upper", "x")
	if err != nil {
		t.Fatal(err)
	}
	if res.Replica == name0 {
		t.Fatal("served by the replica whose config fails")
	}
	if n := rec.count(pool.EventConnectFailed, name0); n != 1 {
		t.Errorf("%d connect attempts after a metadata error, want 1 (next replica at once)", n)
	}
}

func TestAllReplicasFailed(t *testing.T) {
	p := newPool(t, pool.Config{Replicas: []string{deadURL(t), deadURL(t)}})
	_, err := p.Predict(ctxT(t), "", "upper", "x")
	var all *pool.AllReplicasFailedError
	if !errors.As(err, &all) {
		t.Fatalf("err = %v, want *AllReplicasFailedError", err)
	}
	if len(all.Causes) != 2 {
		t.Errorf("causes = %v", all.Causes)
	}
	var ce *gradio.ConnectError
	if !errors.As(err, &ce) {
		t.Errorf("cause is not a *gradio.ConnectError: %v", err)
	}
	for _, name := range p.Replicas() {
		if got := p.Stats(t.Context()).Pools[name].State; got != pool.StateEjected {
			t.Errorf("%s state = %s, want ejected", name, got)
		}
	}
	if p.Ready() {
		t.Error("Ready with every replica ejected")
	}
	// While ejected, replicas are skipped without a connect.
	_, err = p.Predict(ctxT(t), "", "upper", "x")
	if !errors.Is(err, pool.ErrEjected) {
		t.Errorf("while ejected: %v, want ErrEjected", err)
	}
}

// warm makes one call per replica so that each app is connected, and
// returns users pinned to replica 0 and 1.
func pinnedUsers(t *testing.T, p *pool.Pool, api string) (u0, u1 string) {
	t.Helper()
	ctx := ctxT(t)
	for i := 0; u0 == "" || u1 == ""; i++ {
		if i > 20 {
			t.Fatal("no users pinned to both replicas")
		}
		res, err := p.Predict(ctx, user(1000+i), api, "warm")
		if err != nil {
			t.Fatal(err)
		}
		switch res.Replica {
		case p.Replicas()[0]:
			u0 = user(1000 + i)
		case p.Replicas()[1]:
			u1 = user(1000 + i)
		}
	}
	return u0, u1
}

// TestRefusedJoinRetried: a call the app refused (5xx on join, queue full)
// moves to another replica and runs exactly once.
func TestRefusedJoinRetried(t *testing.T) {
	tests := []struct {
		name   string
		inject func(s *gradiotest.Server)
		eject  bool
	}{
		{"5xx on join", func(s *gradiotest.Server) { s.FailNextJoins(1) }, false},
		{"502 on join", func(s *gradiotest.Server) {
			s.UpdateKnobs(func(k *gradiotest.Knobs) { k.FaultStatus = 502 })
			s.FailNextJoins(1)
		}, false},
		{"queue full", func(s *gradiotest.Server) { s.SetQueueFull(true) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo, app := newEchoApp()
			srvs := make([]*gradiotest.Server, 2)
			for i := range srvs {
				srvs[i] = gradiotest.NewServer(app)
				t.Cleanup(srvs[i].Close)
			}
			p := newPool(t, pool.Config{Replicas: urls(srvs)})
			u0, _ := pinnedUsers(t, p, "echo")
			tt.inject(srvs[0])
			res, err := p.Predict(ctxT(t), u0, "echo", "once")
			if err != nil {
				t.Fatal(err)
			}
			if res.Replica != p.Replicas()[1] || res.Attempts != 2 {
				t.Errorf("Result = %+v, want replica 1 after 2 attempts", res)
			}
			if n := echo.runsOf("once"); n != 1 {
				t.Errorf("the call ran %d times, want 1", n)
			}
			st := p.Stats(t.Context()).Pools[p.Replicas()[0]]
			if st.Failovers != 1 {
				t.Errorf("failovers = %d, want 1", st.Failovers)
			}
			if ejected := st.State == pool.StateEjected; ejected != tt.eject {
				t.Errorf("state = %s; ejected %v, want %v", st.State, ejected, tt.eject)
			}
			// One refusal does not eject the replica, but the user now
			// lives on replica 1.
			res, err = p.Predict(ctxT(t), u0, "echo", "again")
			if err != nil || res.Replica != p.Replicas()[1] {
				t.Errorf("after failover: %+v, %v", res, err)
			}
		})
	}
}

// TestAcceptedNotRetried: once the app accepted a call, a failure is
// reported and the call never runs again elsewhere.
func TestAcceptedNotRetried(t *testing.T) {
	echo, app := newEchoApp()
	srvs := make([]*gradiotest.Server, 2)
	for i := range srvs {
		srvs[i] = gradiotest.NewServer(app)
		t.Cleanup(srvs[i].Close)
	}
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	u0, _ := pinnedUsers(t, p, "echo")
	srvs[0].CutNextStreams(1)
	other := srvs[1].Executions("echo")
	_, err := p.Predict(ctxT(t), u0, "echo", "cut")
	var lost *gradio.ConnectionLostError
	if !errors.As(err, &lost) || !lost.Accepted {
		t.Fatalf("err = %v, want an accepted *gradio.ConnectionLostError", err)
	}
	var re *pool.ReplicaError
	if !errors.As(err, &re) || re.Replica != p.Replicas()[0] {
		t.Errorf("err does not name the replica: %v", err)
	}
	// The cut comes right after process_starts: the handler may or may not
	// have started, but the call never ran elsewhere.
	if n := echo.runsOf("cut"); n > 1 || srvs[1].Executions("echo") != other {
		t.Errorf("the call ran %d times, %d on the other replica", n, srvs[1].Executions("echo")-other)
	}
	st := p.Stats(t.Context()).Pools[p.Replicas()[0]]
	if st.Errors != 1 || st.Failovers != 0 || st.InUseConnections != 0 {
		t.Errorf("stats after cut = %+v", st)
	}
	// The broken session was replaced; the replica keeps serving.
	if _, err := p.Predict(ctxT(t), u0, "echo", "next"); err != nil {
		t.Errorf("after cut: %v", err)
	}
}

// TestStalledReplica: a replica that takes the join request and never
// answers has not provably refused it.
func TestStalledReplica(t *testing.T) {
	echo, app := newEchoApp()
	srvs := make([]*gradiotest.Server, 2)
	for i := range srvs {
		srvs[i] = gradiotest.NewServer(app)
		t.Cleanup(srvs[i].Close)
	}
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook,
		ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(500 * time.Millisecond)}})
	u0, _ := pinnedUsers(t, p, "echo")
	srvs[0].SetStall(true)
	defer srvs[0].SetStall(false)
	// The caller's deadline lies past the header time-out: the join is
	// awaited until then (a slow app may still accept it), then reported.
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
	defer cancel()
	res, err := p.Predict(ctx, u0, "echo", "stalled")
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Kind == pool.EventFailover {
			t.Logf("failover: %s: %T %v", e.Replica, e.Err, e.Err)
		}
	}
	rec.mu.Unlock()
	// The join was sent in full and never answered: the app may have
	// queued it, so it is reported, not run on the other replica.
	var lost *gradio.ConnectionLostError
	if err == nil || !errors.Is(err, gradio.ErrMaybeAccepted) && !(errors.As(err, &lost) && lost.MaybeAccepted) {
		t.Fatalf("stalled join: res %+v err %v, want the may-have-been-accepted outcome", res, err)
	}
	if n := echo.runsOf("stalled"); n != 0 {
		t.Errorf("the call ran %d times", n)
	}
}

func TestEjectAndProbe(t *testing.T) {
	srvs := replicas(t, 2)
	srvs[0].FailNextConfigs(1)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook})
	name0 := p.Replicas()[0]
	ctx := ctxT(t)
	if _, err := p.Predict(ctx, user(1), "upper", "x"); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats(t.Context()).Pools[name0].State; got != pool.StateEjected {
		t.Fatalf("state = %s, want ejected", got)
	}
	time.Sleep(120 * time.Millisecond) // past the shortened 50 ms back-off
	// The next users probe replica 0 (its config now loads) and use it.
	served := false
	for i := 2; i < 6; i++ {
		res, err := p.Predict(ctx, user(i), "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		served = served || res.Replica == name0
	}
	if !served || rec.count(pool.EventRecovered, name0) != 1 {
		t.Errorf("replica 0 not recovered: served %v, recovered events %d", served, rec.count(pool.EventRecovered, name0))
	}
	if st := p.Stats(t.Context()).Pools[name0]; st.State != pool.StateReady || st.ConsecutiveFailures != 0 {
		t.Errorf("after probe: %+v", st)
	}
}

func TestCallerErrorsNotRetried(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	ctx := ctxT(t)
	tests := []struct {
		name     string
		endpoint string
		args     []any
		check    func(error) bool
	}{
		{"unknown endpoint", "nope", []any{"x"}, func(err error) bool { return errors.Is(err, gradio.ErrUnknownEndpoint) }},
		{"bad arguments", "upper", []any{"x", "y", "z"}, func(err error) bool {
			var ae *gradio.ArgumentError
			return errors.As(err, &ae)
		}},
		{"gr.Error", "fail", []any{"x"}, func(err error) bool {
			var ae *gradio.AppError
			return errors.As(err, &ae)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Predict(ctx, "u@example.com", tt.endpoint, tt.args...)
			if !tt.check(err) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	if n, _ := executions(srvs, "fail"); n != 1 {
		t.Errorf("fail ran %d times, want 1", n)
	}
	st := p.Stats(t.Context())
	// Only the app error counts, and apart from the replica's failures
	// (issue 22: a gr.Error is the app's answer, not the replica failing).
	if st.Failovers != 0 || st.Errors != 0 || st.AppErrors != 1 {
		t.Errorf("failovers %d errors %d app errors %d, want 0, 0 and 1", st.Failovers, st.Errors, st.AppErrors)
	}
}

// TestRepeatedRefusalsEject: three refused joins in a row eject the replica.
func TestRepeatedRefusalsEject(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	pinnedUsers(t, p, "upper")
	name0 := p.Replicas()[0]
	srvs[0].FailNextJoins(3)
	ctx := ctxT(t)
	for i := 0; srvs[0].CurrentKnobs().FailJoin > 0; i++ {
		if i > 30 {
			t.Fatal("replica 0 never got the calls")
		}
		if got := p.Stats(t.Context()).Pools[name0].State; got == pool.StateEjected {
			t.Fatalf("ejected before the third refusal")
		}
		if _, err := p.Predict(ctx, user(i), "upper", "x"); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Stats(t.Context()).Pools[name0].State; got != pool.StateEjected {
		t.Errorf("after three refusals state = %s, want ejected", got)
	}
}

// TestEjectAfterRefusalsConfigured: the threshold is configuration; a
// negative value means refusals never eject.
func TestEjectAfterRefusalsConfigured(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int
		fails  int
		ejects bool
	}{
		{"one refusal ejects at 1", 1, 1, true},
		{"five refusals do not eject when off", -1, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvs := replicas(t, 2)
			p := newPool(t, pool.Config{Replicas: urls(srvs), EjectAfterRefusals: tc.limit})
			pinnedUsers(t, p, "upper")
			name0 := p.Replicas()[0]
			srvs[0].FailNextJoins(tc.fails)
			ctx := ctxT(t)
			for i := 0; srvs[0].CurrentKnobs().FailJoin > 0; i++ {
				if i > 30 {
					t.Fatal("replica 0 never got the calls")
				}
				if _, err := p.Predict(ctx, user(i), "upper", "x"); err != nil {
					t.Fatal(err)
				}
			}
			if got := p.Stats(t.Context()).Pools[name0].State == pool.StateEjected; got != tc.ejects {
				t.Errorf("after %d refusals ejected = %v, want %v", tc.fails, got, tc.ejects)
			}
		})
	}
}

// TestFailoverPredicates: the exported predicates the gateway branches on.
func TestFailoverPredicates(t *testing.T) {
	refused := &gradio.ProtocolError{Op: "queue/join", StatusCode: 502}
	proxyTimeout := &gradio.ProtocolError{Op: "queue/join", StatusCode: 504}
	for _, tc := range []struct {
		name                  string
		err                   error
		notAccepted, overload bool
	}{
		{"connect failure", &gradio.ConnectError{Src: "x", Err: errors.New("refused")}, true, false},
		{"5xx on join", refused, true, false},
		{"504 on join may have been queued", proxyTimeout, false, false},
		{"app queue full", gradio.ErrQueueFull, true, true},
		{"lost after acceptance", &gradio.ConnectionLostError{Accepted: true, Err: errors.New("cut")}, false, false},
		{"maybe accepted", &gradio.ConnectionLostError{MaybeAccepted: true, Err: errors.New("stalled")}, false, false},
		{"lost before sending", &gradio.ConnectionLostError{Err: errors.New("cut")}, true, false},
		{"app error", &gradio.AppError{Message: "boom"}, false, false},
		{"all busy", &pool.AllReplicasFailedError{Causes: []*pool.ReplicaError{
			{Replica: "a", Err: pool.ErrQueueTimeout}, {Replica: "b", Err: gradio.ErrQueueFull}}}, true, true},
		{"busy and down", &pool.AllReplicasFailedError{Causes: []*pool.ReplicaError{
			{Replica: "a", Err: pool.ErrQueueTimeout}, {Replica: "b", Err: refused}}}, true, false},
		{"no causes", &pool.AllReplicasFailedError{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gradio.ClassifyJoin(tc.err) == gradio.JoinNotAccepted; got != tc.notAccepted {
				t.Errorf("NotAccepted = %v, want %v", got, tc.notAccepted)
			}
			if got := pool.IsOverloaded(tc.err); got != tc.overload {
				t.Errorf("IsOverloaded = %v, want %v", got, tc.overload)
			}
		})
	}
}

// TestRouteLabelsEvents: the route of the caller's context (WithRoute)
// reaches the failover and call-done events of its call, the Submit
// path's and the front door's (Lease.Refused), so that metrics can count
// failovers per door.
func TestRouteLabelsEvents(t *testing.T) {
	srvs := replicas(t, 2)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook})
	u0, _ := pinnedUsers(t, p, "upper")
	srvs[0].FailNextJoins(1)
	if _, err := p.Predict(pool.WithRoute(ctxT(t), "v1"), u0, "upper", "x"); err != nil {
		t.Fatal(err)
	}
	sl, err := p.Reserve(pool.WithRoute(ctxT(t), "frontdoor"), "", pool.ReserveOptions{Replica: p.Replicas()[0], Endpoint: "fn_index=0"})
	if err != nil {
		t.Fatal(err)
	}
	sl.Done(gradio.JoinNotAccepted, errors.New("refused"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var failovers, done []string
	for _, e := range rec.events {
		switch e.Kind {
		case pool.EventFailover:
			failovers = append(failovers, e.Route+" "+e.Endpoint)
		case pool.EventCallDone:
			done = append(done, e.Route)
		}
	}
	if want := []string{"v1 upper", "frontdoor fn_index=0"}; !slices.Equal(failovers, want) {
		t.Errorf("failover events (route endpoint) = %q, want %q", failovers, want)
	}
	if len(done) == 0 || done[len(done)-1] != "v1" {
		t.Errorf("call_done routes = %q, want the last v1", done)
	}
}
