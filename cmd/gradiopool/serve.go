package main

import (
	"context"
	"errors"
	"io"
)

// runServe is being written; until then it says so instead of pretending.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("serve: not implemented yet")
}
