package assign

import "github.com/gradiopool/gradiopool/internal/ttlstore"

// DefaultSweepInterval is how often [Memory] removes expired assignments when
// MemoryConfig.SweepInterval is zero.
const DefaultSweepInterval = ttlstore.DefaultSweepInterval

// MemoryConfig configures [NewMemory]. The zero value is ready to use:
// SweepInterval zero means DefaultSweepInterval, negative disables the
// sweeper (entries then expire only lazily, when looked up).
type MemoryConfig = ttlstore.MemoryConfig

// Memory is an in-process [Store], [Refresher] and [Claimer]: the
// module's one in-memory TTL store (internal/ttlstore), which the Gradio
// front door keeps its caller sessions in too. Create it with [NewMemory]
// and stop its sweeper with Close.
type Memory = ttlstore.Memory

var (
	_ Store     = (*Memory)(nil)
	_ Refresher = (*Memory)(nil)
	_ Claimer   = (*Memory)(nil)
)

// NewMemory returns an empty in-memory store and starts its sweeper.
func NewMemory(cfg MemoryConfig) *Memory { return ttlstore.NewMemory(cfg) }
