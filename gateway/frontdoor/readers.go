package frontdoor

import (
	"context"
	"log/slog"
	"time"
)

// A data stream marks its caller session in Config.Readers every
// readerMarkEvery, each mark kept readerMarkTTL: a mark outlives a gateway
// that died with the stream open by at most that, and a store slower than
// readerMarkEvery a few times over does not let it lapse.
const (
	readerMarkEvery = 3 * time.Second
	readerMarkTTL   = 10 * time.Second
	readerStoreTime = time.Second // bounds one Mark or Marked
)

// markReading marks s in Config.Readers now and then every
// readerMarkEvery until the returned func runs (the stream closed). The
// mark is not removed then: another gateway may have a stream of the
// session open too, and the TTL ends it soon enough.
func (s *callerSession) markReading() (stop func()) {
	rm := s.f.cfg.Readers
	if rm == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(readerMarkEvery)
		defer t.Stop()
		for {
			ctx, cancel := context.WithTimeout(s.f.ctx, readerStoreTime)
			err := rm.Mark(ctx, s.front, readerMarkTTL)
			cancel()
			if err != nil && s.f.ctx.Err() == nil {
				s.f.log.Debug("front door: could not mark a session's data stream for the cluster",
					slog.String("session", shortHash(s.front)), slog.Any("error", err))
			}
			select {
			case <-done:
				return
			case <-s.f.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	// The stream's handler waits for the marker: nothing outlives it.
	return func() { close(done); <-finished }
}

// readElsewhere reports whether another gateway of the cluster serves a
// data stream of s (its mark in Config.Readers), or whether that cannot be
// told (the store did not answer): a call whose grace passed with no
// stream open here is then left running.
func (s *callerSession) readElsewhere() bool {
	rm := s.f.cfg.Readers
	if rm == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(s.f.ctx, readerStoreTime)
	defer cancel()
	marked, err := rm.Marked(ctx, s.front)
	if err != nil {
		s.f.log.Debug("front door: could not ask the cluster whether a session is read; its call keeps running",
			slog.String("session", shortHash(s.front)), slog.Any("error", err))
		return true
	}
	return marked
}
