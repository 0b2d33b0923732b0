// The create-rate bucket: each tenant's token bucket of sandbox creates, one Lua script
// shared by every gateway.

package store

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

var bucketScript = newOpScript(`
-- KEYS: bucket, (op token); ARGV: rate/s, burst, nowMs, take
local rate, burst, now, take = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if not tokens then tokens, ts = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local ok = 0
if tokens >= take then tokens = tokens - take; ok = 1 end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {ok, tostring(tokens)}
`)

// TakeTokens takes n tokens from a tenant's create bucket (shared by every gateway); it
// reports whether there were enough and how many are left.
func (s *Store) TakeTokens(ctx context.Context, tenant string, rate, burst float64, n int, now time.Time) (bool, float64, error) {
	res, err := bucketScript.Run(ctx, s, []string{s.Key("tenant", tenant, "bucket")}, rate, burst, now.UnixMilli(), n).Slice()
	if err != nil {
		return false, 0, wrap(err)
	}
	left, _ := strconv.ParseFloat(fmt.Sprint(res[1]), 64)
	ok, _ := res[0].(int64)
	return ok == 1, left, nil
}
