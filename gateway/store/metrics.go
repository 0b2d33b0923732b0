package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// OldestExpiry returns the earliest expiry in the expiry index (zero when it is empty),
// for the reaper-lag metric.
func (s *Store) OldestExpiry(ctx context.Context) (time.Time, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, s.expiryKey(), 0, 0).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return time.Time{}, wrap(err)
	}
	if len(zs) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(zs[0].Score)), nil
}
