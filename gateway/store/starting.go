// Starting counts: how many warm members of each pool each gateway is starting right
// now. Every gateway publishes its own; the one that refills a pool adds the others'
// to its own (a gateway that held the "pools" lease before may still be starting
// members), and every replica reports the same pool status.

package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// startingKey holds one field per pool and gateway, "<poolKey>|<owner>", whose value is
// "<count>:<expiry in Redis's milliseconds>".
func (s *Store) startingKey() string { return s.Key("pools", "starting") }

// publishStartingScript writes owner's counts, drops its zero ones and every lapsed
// field, and keeps the hash as long as anyone publishes. Expiries are on Redis's clock,
// so gateways' clocks need not agree.
var publishStartingScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 3, #ARGV, 2 do
  local field = ARGV[i] .. '|' .. ARGV[2]
  if tonumber(ARGV[i+1]) > 0 then
    redis.call('HSET', KEYS[1], field, ARGV[i+1] .. ':' .. (now + ttl))
  else
    redis.call('HDEL', KEYS[1], field)
  end
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i+1], ':(%d+)$'))
  if exp == nil or exp <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
`)

// PublishStarting records, for ttl, how many warm members of each pool (by PoolKey)
// gateway owner is starting; a zero count clears owner's entry. A gateway that dies
// stops publishing and its counts lapse.
func (s *Store) PublishStarting(ctx context.Context, owner string, counts map[string]int, ttl time.Duration) error {
	args := []any{ttl.Milliseconds(), owner}
	for k, n := range counts {
		args = append(args, k, n)
	}
	return wrap(publishStartingScript.Run(ctx, s.rdb, []string{s.startingKey()}, args...).Err())
}

var startingCountScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1] .. '|'
local skip = prefix .. ARGV[2]
local sum = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f = all[i]
  if f ~= skip and string.sub(f, 1, #prefix) == prefix then
    local n, exp = string.match(all[i+1], '^(%d+):(%d+)$')
    if n ~= nil and tonumber(exp) > now then sum = sum + tonumber(n) end
  end
end
return sum
`)

// StartingCount returns how many warm members of a pool the gateways publish as
// starting now, leaving out gateway except's own count ("" leaves out none).
func (s *Store) StartingCount(ctx context.Context, poolKey, except string) (int64, error) {
	n, err := startingCountScript.Run(ctx, s.rdb, []string{s.startingKey()}, poolKey, except).Int64()
	return n, wrap(err)
}
