// Cooldowns: "at most once per window, across all gateways" (renew-on-access renews a
// sandbox at most once per cooldown, whichever gateway proxies its traffic).

package store

import (
	"context"
	"time"
)

// cooldownScript starts a cooldown unless one started less than a window ago. The key
// holds when the last one started, on the clock of the gateway that started it; the
// decision compares that with the caller's now, so that it is taken on the gateway's
// clock, not on Redis's. The key's own expiry (two windows) only bounds what a clock
// far behind can hold off, and clears the key.
var cooldownScript = newOpScript(`
local last = tonumber(redis.call('GET', KEYS[1]))
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
if last and now < last + window then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', 2 * window)
return 1
`)

// TryCooldown reports true at most once per window for name, across all gateways, at
// the caller's time now. Between gateways whose clocks differ by d, the window is kept
// to within d: a gateway ahead may start the next one d early, one behind waits d
// longer (at most a second window, when the key expires).
func (s *Store) TryCooldown(ctx context.Context, name string, now time.Time, window time.Duration) (bool, error) {
	n, err := cooldownScript.Run(ctx, s, []string{s.Key("cooldown", name)}, now.UnixMilli(), max(window.Milliseconds(), 1)).Int()
	return n == 1, wrap(err)
}
