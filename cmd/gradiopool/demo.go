package main

import (
	"context"
	"errors"
	"io"
)

// runDemo is being written; until then it says so instead of pretending.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("demo: not implemented yet")
}
