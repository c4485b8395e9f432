package pool

import "time"

// ProbeRoundWait runs one round of the background prober now and waits
// (at most 5 s) for its probes to end.
func ProbeRoundWait(p *Pool) {
	p.probeRound(p.now())
	for i := 0; i < 1000; i++ {
		busy := false
		for _, r := range p.set.Load().list {
			busy = busy || r.checking.Load()
		}
		if !busy {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
