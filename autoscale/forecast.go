package autoscale

import (
	"math"
	"time"
)

// Forecaster predicts demand (calls in use plus waiting) a lead time
// ahead: the larger of a moving average of recent demand and a learned
// profile of the week. The profile keeps, per 5-minute slot of the week,
// a decaying peak of the demand seen in that slot; until a slot of the
// week has been seen, the same slot of the day stands in for it (so the
// first week already learns the daily rhythm).
type Forecaster struct {
	tau  time.Duration // moving average time constant
	ma   float64
	last time.Time

	week [slotsPerWeek]slot
	day  [slotsPerDay]slot
}

type slot struct {
	peak float64
	seen bool
	at   time.Time // start of the slot instance the peak belongs to
}

const (
	slotLen      = 5 * time.Minute
	slotsPerDay  = int(24 * time.Hour / slotLen)
	slotsPerWeek = 7 * slotsPerDay
	// profileKeep is how much of a slot's earlier peak survives a new
	// instance of that slot (the rest is the new peak).
	profileKeep = 0.5
)

// NewForecaster returns a Forecaster whose moving average has time
// constant tau (<= 0: 10 minutes).
func NewForecaster(tau time.Duration) *Forecaster {
	if tau <= 0 {
		tau = 10 * time.Minute
	}
	return &Forecaster{tau: tau}
}

func slotOf(t time.Time) (week, day int) {
	t = t.UTC()
	sod := t.Hour()*3600 + t.Minute()*60 + t.Second()
	day = sod / int(slotLen.Seconds())
	return int(t.Weekday())*slotsPerDay + day, day
}

// Observe records the demand d seen at now.
func (f *Forecaster) Observe(now time.Time, d float64) {
	if f.last.IsZero() {
		f.ma = d
	} else if dt := now.Sub(f.last); dt > 0 {
		a := 1 - math.Exp(-float64(dt)/float64(f.tau))
		f.ma += a * (d - f.ma)
	}
	f.last = now
	w, dy := slotOf(now)
	start := now.Truncate(slotLen)
	observeSlot(&f.week[w], start, d)
	observeSlot(&f.day[dy], start, d)
}

func observeSlot(s *slot, start time.Time, d float64) {
	switch {
	case !s.seen:
		s.peak, s.seen, s.at = d, true, start
	case !s.at.Equal(start): // a new day or week in this slot
		s.peak, s.at = profileKeep*s.peak+(1-profileKeep)*d, start
		// the new instance's own peak is taken below as it grows
	default:
		if d > s.peak {
			s.peak = d
		}
	}
}

// MovingAverage is the current moving average of demand.
func (f *Forecaster) MovingAverage() float64 { return f.ma }

// Profile is the learned demand for the slots from at to at+span (their
// largest peak; 0 if none is known).
func (f *Forecaster) Profile(at time.Time, span time.Duration) float64 {
	best := 0.0
	for t := at.Truncate(slotLen); !t.After(at.Add(span)); t = t.Add(slotLen) {
		w, d := slotOf(t)
		switch {
		case f.week[w].seen && !f.week[w].at.Equal(t.Truncate(slotLen)):
			best = max(best, f.week[w].peak)
		case f.day[d].seen && !f.day[d].at.Equal(t.Truncate(slotLen)):
			best = max(best, f.day[d].peak)
		}
	}
	return best
}

// At forecasts demand at now+lead: max(moving average, profile of the
// slots from now to now+lead).
func (f *Forecaster) At(now time.Time, lead time.Duration) float64 {
	return max(f.ma, f.Profile(now, lead))
}
