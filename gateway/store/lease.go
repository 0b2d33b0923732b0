package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

var acquireLeaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

var releaseLeaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// AcquireLease takes or extends the named lease for owner; it reports whether owner holds
// it now. Leases make singleton jobs (reaper, pool manager) safe with several gateways.
func (s *Store) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	n, err := acquireLeaseScript.Run(ctx, s.rdb, []string{s.Key("lease", name)}, owner, ttl.Milliseconds()).Int()
	return n == 1, wrap(err)
}

// ReleaseLease gives the lease up if owner holds it.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string) error {
	return wrap(releaseLeaseScript.Run(ctx, s.rdb, []string{s.Key("lease", name)}, owner).Err())
}
