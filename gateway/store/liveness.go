// Gateway liveness: each gateway's heartbeat, by which the others know whose in-flight
// work to take over.

package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

func (s *Store) aliveKey(owner string) string { return s.Key("alive", owner) }

// Heartbeat says that gateway owner is alive for the next ttl. Work a gateway has in
// flight (Pending records, batch members) names it; once its heartbeat lapses, another
// gateway (or the same one restarted) takes that work over.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	return wrap(s.rdb.Set(ctx, s.aliveKey(owner), "1", ttl).Err())
}

// EndHeartbeat says at once that owner is gone (a graceful stop).
func (s *Store) EndHeartbeat(ctx context.Context, owner string) error {
	return wrap(s.rdb.Del(ctx, s.aliveKey(owner)).Err())
}

// Alive reports which of owners have a current heartbeat.
func (s *Store) Alive(ctx context.Context, owners []string) (map[string]bool, error) {
	out := make(map[string]bool, len(owners))
	if len(owners) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make(map[string]*redis.IntCmd, len(owners))
	for _, o := range owners {
		if _, ok := cmds[o]; !ok {
			cmds[o] = pipe.Exists(ctx, s.aliveKey(o))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap(err)
	}
	for o, c := range cmds {
		out[o] = c.Val() == 1
	}
	return out, nil
}
