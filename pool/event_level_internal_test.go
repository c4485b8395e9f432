package pool

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestAssignmentLogLevels: a new user's assignment is routine (debug); a
// user moved off its replica (its gr.State stays behind) is logged at
// info, and a failing assignment store at warn, so that an operator, and a
// test that sees users move, can tell why.
func TestAssignmentLogLevels(t *testing.T) {
	var buf bytes.Buffer
	p, err := New(Config{Replicas: []string{"http://127.0.0.1:1"}, ProbeInterval: -1, MinConnections: -1,
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	for _, tc := range []struct {
		e    Event
		want string // the level logged at info and above; "" none
	}{
		{Event{Kind: eventAssigned, Replica: "b", User: "u1"}, ""},
		{Event{Kind: eventAssigned, Replica: "b", Previous: "a", User: "u2"}, "level=INFO"},
		{Event{Kind: eventAssigned, User: "u3", Err: errors.New("assignment store: down")}, "level=WARN"},
	} {
		buf.Reset()
		p.emit(tc.e)
		got := buf.String()
		if tc.want == "" && strings.Contains(got, "pool: assigned") || tc.want != "" && !strings.Contains(got, tc.want+` msg="pool: assigned"`) {
			t.Errorf("%+v logged %q, want %q", tc.e, got, tc.want)
		}
	}
}
