// Package logbuf is a goroutine-safe in-memory writer, for tests that read
// what a logger or a subprocess wrote while it is still writing.
package logbuf
