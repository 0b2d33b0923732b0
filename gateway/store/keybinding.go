package store

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// KeyHashByID returns the stored hash of the key with id: one HGET, cheap enough for
// every proxied request that carries a key-bound access header. ErrNotFound when the
// key does not exist or was revoked.
func (s *Store) KeyHashByID(ctx context.Context, id string) (string, error) {
	h, err := s.rdb.HGet(ctx, s.keyIDsKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", wrap(err)
	}
	return h, nil
}
