package sse_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// BenchmarkBudgetLongLine reads one 4 MiB event on a replica's part of a
// Budget: every 16 KiB block past the allowance is taken from it, then
// given back.
func BenchmarkBudgetLongLine(b *testing.B) {
	in := []byte("data: " + strings.Repeat("x", 4<<20) + "\n\n")
	part := sse.NewBudget(256 << 20).Part()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		r := sse.NewReaderBudget(bytes.NewReader(in), 0, part)
		if _, err := r.Next(); err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
}

// BenchmarkBudgetStreamsParallel opens a stream per call on one replica's
// part from parallel goroutines, each reading ten small events (a
// Gradio call's messages): the cost of registering a Reader with its
// Budget, under contention.
func BenchmarkBudgetStreamsParallel(b *testing.B) {
	in := []byte(strings.Repeat("data: {\"msg\":\"process_generating\",\"output\":{\"data\":[\"hello\"]}}\n\n", 10))
	part := sse.NewBudget(256 << 20).Part()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := sse.NewReaderBudget(bytes.NewReader(in), 0, part)
			for range 10 {
				if _, err := r.Next(); err != nil {
					b.Error(err)
					return
				}
			}
			r.Release()
		}
	})
}
