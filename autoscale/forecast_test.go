package autoscale_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/autoscale"
)

// monday is the start of the forecaster tests' traces (00:00 UTC).
var monday = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

const tick = 5 * time.Second

// observeDay feeds f one day of demand(t) (t since the day's start), a
// sample every tick, from day on.
func observeDay(f *autoscale.Forecaster, day time.Time, demand func(t time.Duration) float64) {
	for t := time.Duration(0); t < 24*time.Hour; t += tick {
		f.Observe(day.Add(t), demand(t))
	}
}

// sawtooth is 1 to 12 over each hour, one step per 5-minute slot, then
// back to 1: every hour ends with a fall.
func sawtooth(t time.Duration) float64 {
	return float64(1 + int(t/(5*time.Minute))%12)
}

// TestForecastProfileAtLeadTime: the profile's part of the forecast at
// now+lead is what it learned for the slot of now+lead, not the largest
// level of every slot from the start of now's slot on (which held a
// level past its slot's end, and a slot's level from before now, so the
// forecast ran above the demand that came wherever the demand falls).
// The next day is quiet, so the moving average is 0 after an hour and
// the forecast is the profile alone.
func TestForecastProfileAtLeadTime(t *testing.T) {
	f := autoscale.NewForecaster(10 * time.Minute)
	observeDay(f, monday, sawtooth)
	tuesday := monday.Add(24 * time.Hour)
	leads := []time.Duration{0, 90 * time.Second, 3 * time.Minute, 4*time.Minute + 59*time.Second, 12 * time.Minute}
	bad := 0
	for since := time.Duration(0); since < 23*time.Hour; since += tick {
		now := tuesday.Add(since)
		f.Observe(now, 0)
		if since < time.Hour { // the moving average still remembers Monday night
			continue
		}
		for _, lead := range leads {
			want := sawtooth(since + lead) // Monday's demand in the slot of now+lead
			if got := f.At(now, lead); got != want {
				if bad++; bad <= 3 {
					t.Errorf("At(%s, %v) = %v, want %v (the level of the slot of %s)", now.Format("15:04:05"), lead, got, want, now.Add(lead).Format("15:04:05"))
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d forecasts of %d were not the level of the slot at the lead time", bad, 22*3600/5*len(leads))
	}
	// Waking ahead still works: the rise at 12:00 (12 → 1 at the hour,
	// then 1 → 2 at 12:05) is seen one lead before it comes.
	if got := f.At(tuesday.Add(12*time.Hour+2*time.Minute), 3*time.Minute); got != 2 {
		t.Errorf("At(12:02, 3m) = %v, want 2 (the 12:05 slot)", got)
	}
}

// TestForecastProfileUnbiased: on a demand with no pattern but noise
// (the same mean all day), the profile's forecast at the lead time is the
// demand that came there on average. Taking the largest of the slots
// from now's to now+lead's made it run a few percent high on this
// trace, and more the noisier the demand (it picked the noise's peaks).
func TestForecastProfileUnbiased(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 1))
	noise := map[time.Duration]float64{}
	demand := func(t time.Duration) float64 {
		d := float64(rng.IntN(11)) // 0..10, mean 5
		noise[t] = d
		return d
	}
	f := autoscale.NewForecaster(10 * time.Minute)
	observeDay(f, monday, demand)
	tuesday := monday.Add(24 * time.Hour)
	for _, lead := range []time.Duration{90 * time.Second, 3 * time.Minute} {
		g := *f // each lead on its own copy: Tuesday's observations change it
		var sumF, sumD float64
		for since := time.Duration(0); since < 23*time.Hour; since += tick {
			g.Observe(tuesday.Add(since), 0)
			if since < time.Hour {
				continue
			}
			sumF += g.At(tuesday.Add(since), lead)
			sumD += noise[(since+lead)/tick*tick] // what came there on Monday
		}
		r := sumF / sumD
		t.Logf("lead %v: forecast / demand that came = %.4f", lead, r)
		if math.Abs(r-1) > 0.005 {
			t.Errorf("lead %v: forecast / demand that came = %.4f, want 1 within 0.5%%", lead, r)
		}
	}
}

// TestForecastTimeOfWeek: once a slot of the week is known it is read for
// that weekday's slot (not its neighbour's, nor the days' blend): a
// Monday unlike the other days is forecast on the next Monday, from its
// first slot on, and the other days' slots stay the days'.
func TestForecastTimeOfWeek(t *testing.T) {
	f := autoscale.NewForecaster(10 * time.Minute)
	flat := func(time.Duration) float64 { return 5 }
	observeDay(f, monday, sawtooth)
	for d := 1; d < 7; d++ {
		observeDay(f, monday.Add(time.Duration(d)*24*time.Hour), flat)
	}
	next := monday.Add(7 * 24 * time.Hour)
	// Sunday 23:58 with a lead of 3 min reads Monday 00:01.
	if got := f.Profile(next.Add(time.Minute)); got != 1 {
		t.Errorf("Profile(Monday 00:01) = %v, want 1 (last Monday's first slot)", got)
	}
	for _, at := range []time.Duration{10*time.Hour + 2*time.Minute, 10*time.Hour + 57*time.Minute, 23*time.Hour + 59*time.Minute} {
		if got, want := f.Profile(next.Add(at)), sawtooth(at); got != want {
			t.Errorf("Profile(Monday %v) = %v, want %v (last Monday's)", at, got, want)
		}
		// Tuesday's is last Tuesday's (5), not the days' blend (which
		// Monday's sawtooth pulls off 5) nor Monday's.
		if got := f.Profile(next.Add(24*time.Hour + at)); got != 5 {
			t.Errorf("Profile(Tuesday %v) = %v, want 5", at, got)
		}
	}
}
