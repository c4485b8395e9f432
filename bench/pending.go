//go:build !benchwip

package bench

import (
	"context"
	"errors"
	"io"
)

var errPending = errors.New("dependency not landed yet")

func runHeadline(ctx context.Context, e *env, s *Section) error   { return errPending }
func runOverhead(ctx context.Context, e *env, s *Section) error   { return errPending }
func runThroughput(ctx context.Context, e *env, s *Section) error { return errPending }
func runPeers(ctx context.Context, e *env, s *Section) error      { return errPending }

func scaleInFlight(ctx context.Context, e *env, s *Section) error { return errPending }

// RunChild is a stub until the helper processes land.
func RunChild(ctx context.Context, stdout io.Writer) (bool, error) { return false, nil }
