package autoscale

import (
	"math"
	"time"
)

// Forecaster predicts demand (calls in use plus waiting) a lead time
// ahead: the larger of a moving average of recent demand and a learned
// profile of the week at that time. The profile keeps, per 5-minute slot of the week,
// the mean demand seen in that slot, blended over the weeks; until a slot
// of the week has been seen, the same slot of the day stands in for it
// (so the first week already learns the daily rhythm).
type Forecaster struct {
	tau  time.Duration // moving average time constant
	ma   float64
	last time.Time

	week [slotsPerWeek]slot
	day  [slotsPerDay]slot
}

// slot is one slot of the profile: level is the blended mean of its
// finished instances (valid once known), sum and n the instance under way.
type slot struct {
	level float64
	known bool
	at    time.Time // start of the instance under way
	sum   float64
	n     int
}

const (
	slotLen      = 5 * time.Minute
	slotsPerDay  = int(24 * time.Hour / slotLen)
	slotsPerWeek = 7 * slotsPerDay
	// profileKeep is how much of a slot's level survives a new instance
	// of that slot.
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
	if !s.at.Equal(start) {
		if s.n > 0 { // the earlier instance is over: fold its mean in
			m := s.sum / float64(s.n)
			if s.known {
				s.level = profileKeep*s.level + (1-profileKeep)*m
			} else {
				s.level, s.known = m, true
			}
		}
		s.at, s.sum, s.n = start, 0, 0
	}
	s.sum += d
	s.n++
}

// levelBefore is the slot's level from the instances that began before
// start (a finished instance not folded in yet counts too).
func (s *slot) levelBefore(start time.Time) (float64, bool) {
	if s.n == 0 || !s.at.Before(start) {
		return s.level, s.known
	}
	m := s.sum / float64(s.n)
	if s.known {
		return profileKeep*s.level + (1-profileKeep)*m, true
	}
	return m, true
}

// MovingAverage is the current moving average of demand.
func (f *Forecaster) MovingAverage() float64 { return f.ma }

// Profile is the learned demand at at: the level of at's slot of the
// week, or until that is known, of the same slot of the day (0 if neither
// is known).
func (f *Forecaster) Profile(at time.Time) float64 {
	t := at.Truncate(slotLen)
	w, d := slotOf(t)
	if l, ok := f.week[w].levelBefore(t); ok {
		return l
	}
	if l, ok := f.day[d].levelBefore(t); ok {
		return l
	}
	return 0
}

// At forecasts demand at now+lead: the larger of the moving average and
// the profile at now+lead. Each alone is unbiased where demand keeps its
// level or its time of week; the larger of the two runs above both
// wherever they disagree by chance (issue 34 asks for the larger).
// Slots between now and now+lead are not looked at: earlier calls, one
// lead before them, forecast those.
func (f *Forecaster) At(now time.Time, lead time.Duration) float64 {
	return max(f.ma, f.Profile(now.Add(lead)))
}
