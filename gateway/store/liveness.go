package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterID returns the identity of this store: a random id made once and kept, carried
// by every sandbox the gateways of this store start (runtimes.LabelCluster), so that a
// gateway adopts and removes only its own store's sandboxes. With Redis the id is a key;
// the embedded store is lost when its gateway stops, so its id is kept in its directory
// instead (embeddeddir.go), which lets a restarted gateway recognise its own sandboxes.
func (s *Store) ClusterID(ctx context.Context) (string, error) {
	if s.embedded != nil && s.dir != nil {
		id, err := clusterFromFile(s.dir.clusterFile())
		if err == nil {
			return id, nil
		}
		s.log.Warn("cannot keep the embedded store's cluster id in its directory; a restart will not recognise this run's sandboxes", "dir", s.dir.path, "err", err)
		s.dir.release()
		s.dir = nil
	}
	key := s.Key("cluster")
	if err := s.rdb.SetNX(ctx, key, randomID(), 0).Err(); err != nil {
		return "", wrap(err)
	}
	id, err := s.rdb.Get(ctx, key).Result()
	return id, wrap(err)
}

// clusterFromFile reads the id kept in path, making it first if there is none. The
// first writer wins (a hard link), so that stores sharing a directory where it cannot
// be locked agree.
func clusterFromFile(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	tmp := fmt.Sprintf("%s.%s", path, randomID())
	if err := os.WriteFile(tmp, []byte(randomID()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	defer os.Remove(tmp)
	// A hard link fails if path exists: the first gateway's id stands.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

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
