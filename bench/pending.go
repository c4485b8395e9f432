package bench

import (
	"context"
	"errors"
)

var errPending = errors.New("dependency not landed yet")

func runHeadline(ctx context.Context, e *env, s *Section) error   { return errPending }
func runOverhead(ctx context.Context, e *env, s *Section) error   { return errPending }
func runThroughput(ctx context.Context, e *env, s *Section) error { return errPending }
func runScale(ctx context.Context, e *env, s *Section) error      { return errPending }
func runPeers(ctx context.Context, e *env, s *Section) error      { return errPending }
