package main

import (
	"context"
	"errors"
	"io"
)

// runBench is being written; until then it says so instead of pretending.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("bench: not implemented yet")
}
