package assign_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/assign/assigntest"
)

func TestMemoryConformance(t *testing.T) {
	assigntest.Run(t, func(t *testing.T) assign.Store {
		s := assign.NewMemory(assign.MemoryConfig{})
		t.Cleanup(func() { s.Close() })
		return s
	}, assigntest.Options{
		TTL:  time.Hour,
		Wrap: func(t *testing.T, f func(t *testing.T)) { synctest.Test(t, f) },
	})
}
