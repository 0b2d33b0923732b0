// Preview link signing keys, shared by every gateway: the keys that gateway/linksign signs
// and checks links and cookies with, kept in one hash with the current and previous kid.

package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// LinkKeys returns the link signing keys (kid → hex secret) and the current kid.
func (s *Store) LinkKeys(ctx context.Context) (map[string]string, string, error) {
	all, err := s.rdb.HGetAll(ctx, s.Key("linkkeys")).Result()
	if err != nil {
		return nil, "", wrap(err)
	}
	cur := all["_current"]
	delete(all, "_current")
	delete(all, "_previous")
	return all, cur, nil
}

var rotateKeyScript = redis.NewScript(`
-- keep the current key as previous, drop the one before it, make the new key current
local cur = redis.call('HGET', KEYS[1], '_current')
-- A rotation sent again (its answer late) finds itself done: running it again would drop
-- the previous key (the current one before it) for its own.
if cur == ARGV[1] and redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return ARGV[1] end
local prev = redis.call('HGET', KEYS[1], '_previous')
if prev then redis.call('HDEL', KEYS[1], prev) end
if cur then redis.call('HSET', KEYS[1], '_previous', cur) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], '_current', ARGV[1])
return ARGV[1]
`)

// RotateLinkKey installs a new current signing key, keeping only the previous one beside it.
func (s *Store) RotateLinkKey(ctx context.Context, kid, secretHex string) (string, error) {
	res, err := rotateKeyScript.Run(ctx, s.rdb, []string{s.Key("linkkeys")}, kid, secretHex).Text()
	return res, wrap(err)
}
