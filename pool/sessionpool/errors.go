package sessionpool

import (
	"errors"
	"fmt"
)

var (
	// ErrPoolClosed is returned by Acquire on a closed pool, and to callers
	// still waiting when Close is called.
	ErrPoolClosed = errors.New("sessionpool: pool closed")

	// ErrQueueTimeout is returned by Acquire when no session became free
	// within Config.QueueTimeout.
	ErrQueueTimeout = errors.New("sessionpool: timed out waiting for a session")

	// ErrQueueFull is returned by Acquire at once when Config.MaxWaiters
	// callers are already waiting.
	ErrQueueFull = errors.New("sessionpool: wait queue full")
)

// ConnectError is returned by Acquire when the connect started for that
// caller failed. It wraps Config.Connect's error, so errors.Is and errors.As
// see through it to the cause (a *gradio.MetadataError, say).
type ConnectError struct {
	Err error
}

func (e *ConnectError) Error() string { return fmt.Sprintf("sessionpool: connect: %v", e.Err) }

func (e *ConnectError) Unwrap() error { return e.Err }
