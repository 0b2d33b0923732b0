package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// OldestExpiry returns the earliest expiry in the tenants' expiry schedules (zero when
// they are empty), for the reaper-lag metric.
func (s *Store) OldestExpiry(ctx context.Context) (time.Time, error) {
	tenants, err := s.activeTenants(ctx)
	if err != nil || len(tenants) == 0 {
		return time.Time{}, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(tenants))
	for i, t := range tenants {
		cmds[i] = pipe.ZRangeWithScores(ctx, s.expiryKey(t), 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return time.Time{}, wrap(err)
	}
	var oldest time.Time
	for _, c := range cmds {
		if zs := c.Val(); len(zs) > 0 {
			if at := time.UnixMilli(int64(zs[0].Score)); oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
	}
	return oldest, nil
}
