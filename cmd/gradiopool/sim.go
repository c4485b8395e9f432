package main

import (
	"context"
	"errors"
	"io"
)

// runSim is being written; until then it says so instead of pretending.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("sim: not implemented yet")
}
