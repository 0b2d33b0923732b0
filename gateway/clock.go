package gateway

import (
	"sync/atomic"
	"time"
)

// clock is the gateway's time for the decisions that wait on it: renew-on-access (its
// throttle, its cooldown, the new expiry) and the expiry of signed preview links and
// cookies. It is the wall clock plus an offset that is zero unless Config.TestClock is
// set, and then only moves forward, through AdvanceClock: an end-to-end test moves it
// past a cooldown or a link's expiry instead of sleeping through them. Forward only, so
// the gateway's time never runs backwards nor slower than the wall clock.
type clock struct {
	offset atomic.Int64 // nanoseconds ahead of the wall clock
}

func (c *clock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// now is the gateway's time (clock).
func (s *Service) now() time.Time { return s.clock.now() }

// maxClockStep bounds one AdvanceClock.
const maxClockStep = 24 * time.Hour

// TestClockEnabled reports whether AdvanceClock may move this gateway's clock
// (Config.TestClock; the HTTP layer serves its route only then).
func (s *Service) TestClockEnabled() bool { return s.cfg.TestClock }

// AdvanceClock moves the gateway's clock d forward (0 < d ≤ 24h) and returns its new
// time. Only a gateway built with Config.TestClock has it, and only the platform admin
// may move it.
func (s *Service) AdvanceClock(caller Caller, d time.Duration) (time.Time, error) {
	if !s.cfg.TestClock {
		return time.Time{}, Errorf(KindNotFound, CodeRouteNotFound, "no test clock on this gateway")
	}
	if !caller.Admin {
		return time.Time{}, Errorf(KindForbidden, CodeForbidden, "only the platform admin moves the test clock")
	}
	if d <= 0 || d > maxClockStep {
		return time.Time{}, invalid("advance %s: want more than 0 and at most %s", d, maxClockStep)
	}
	s.clock.offset.Add(int64(d))
	now := s.now()
	s.log.Warn("test clock advanced", "by", d.String(), "offset", time.Duration(s.clock.offset.Load()).String())
	return now, nil
}
