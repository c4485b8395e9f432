package main

import (
	"context"
	"errors"
	"io"
)

// runCall is being written; until then it says so instead of pretending.
func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("call: not implemented yet")
}
