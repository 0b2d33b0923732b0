// Sandbox activity: when each sandbox was last used (one sorted set, sandbox id by time),
// written by renew-on-access for every proxied request.

package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// TouchActivity records when a sandbox was last used.
func (s *Store) TouchActivity(ctx context.Context, id string, at time.Time) error {
	return wrap(s.rdb.ZAdd(ctx, s.Key("activity"), redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err())
}

// TouchActivities records when each of several sandboxes was last used, in one command.
func (s *Store) TouchActivities(ctx context.Context, at map[string]time.Time) error {
	if len(at) == 0 {
		return nil
	}
	zs := make([]redis.Z, 0, len(at))
	for id, t := range at {
		zs = append(zs, redis.Z{Score: float64(t.UnixMilli()), Member: id})
	}
	return wrap(s.rdb.ZAdd(ctx, s.Key("activity"), zs...).Err())
}

// LastActivity returns when a sandbox was last used (zero if never).
func (s *Store) LastActivity(ctx context.Context, id string) (time.Time, error) {
	ms, err := s.rdb.ZScore(ctx, s.Key("activity"), id).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(ms)), wrap(err)
}
