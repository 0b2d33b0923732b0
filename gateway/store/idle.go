package store

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The idle schedule is a sorted set of sandbox ids by the time (unix ms) they pause
// unless traffic comes first (extensions["idle.pause.seconds"]); every proxied request
// moves a sandbox's time, on whichever gateway it arrives.
func (s *Store) idleKey() string { return s.Key("idle") }

// ScheduleIdle sets when sandbox id pauses unless traffic comes first.
func (s *Store) ScheduleIdle(ctx context.Context, id string, at time.Time) error {
	return wrap(s.rdb.ZAdd(ctx, s.idleKey(), redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err())
}

// IdleDue lists up to n sandboxes whose idle time has come by now.
func (s *Store) IdleDue(ctx context.Context, now time.Time, n int64) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.idleKey(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: n}).Result()
	return ids, wrap(err)
}

// IdleAt returns when sandbox id is due to pause (zero when it is not scheduled).
func (s *Store) IdleAt(ctx context.Context, id string) (time.Time, error) {
	ms, err := s.rdb.ZScore(ctx, s.idleKey(), id).Result()
	if err == redis.Nil {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, wrap(err)
	}
	return time.UnixMilli(int64(ms)), nil
}

// UnscheduleIdle takes sandbox id off the idle schedule.
func (s *Store) UnscheduleIdle(ctx context.Context, id string) error {
	return wrap(s.rdb.ZRem(ctx, s.idleKey(), id).Err())
}

// UnscheduleIdleIf takes sandbox id off the idle schedule only if its time is still at
// (no request moved it meanwhile); it reports whether it did.
func (s *Store) UnscheduleIdleIf(ctx context.Context, id string, at time.Time) (bool, error) {
	n, err := unscheduleIdleScript.Run(ctx, s, []string{s.idleKey()}, id, at.UnixMilli()).Int()
	return n == 1, wrap(err)
}

var unscheduleIdleScript = newOpScript(`
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if cur and tonumber(cur) == tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
`)
