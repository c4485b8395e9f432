// Package backoff computes growing, capped, jittered delays for retries and
// for ejecting a failing replica.
//
//	b := backoff.Backoff{Base: time.Second, Max: time.Minute}
//	for attempt := 0; ; attempt++ {
//		if err := try(); err == nil {
//			break
//		}
//		time.Sleep(b.Delay(attempt))
//	}
package backoff
