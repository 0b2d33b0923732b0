// Starting counts: how many warm members of each pool are being started right now,
// published by the pool manager so that every replica reports the same pool status.

package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func (s *Store) startingKey() string { return s.Key("pools", "starting") }

var publishStartingScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// PublishStarting records how many warm members of each pool (by PoolKey) are starting,
// for ttl: the pool manager, which alone starts them, publishes its counts on every
// pass, so that every replica reports the same status and a dead manager's counts lapse.
func (s *Store) PublishStarting(ctx context.Context, counts map[string]int, ttl time.Duration) error {
	args := []any{ttl.Milliseconds()}
	for k, n := range counts {
		if n > 0 {
			args = append(args, k, n)
		}
	}
	if len(args) == 1 {
		// Nothing starts: an empty hash is no hash, which reads as zero everywhere.
		return wrap(s.rdb.Del(ctx, s.startingKey()).Err())
	}
	return wrap(publishStartingScript.Run(ctx, s.rdb, []string{s.startingKey()}, args...).Err())
}

// StartingCount returns the published count of warm members of a pool starting now.
func (s *Store) StartingCount(ctx context.Context, poolKey string) (int64, error) {
	v, err := s.rdb.HGet(ctx, s.startingKey(), poolKey).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, wrap(err)
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n, nil
}
