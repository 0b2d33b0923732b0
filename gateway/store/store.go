// Package store keeps sandgate's shared state in Redis: sandbox records, the per-tenant
// index, the expiry schedule, leases and events. Every multi-key change is one Lua script,
// so that the embedded store (miniredis) and a real Redis run exactly the same commands.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Errors callers may inspect.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("concurrent update")
	ErrUnavailable = errors.New("store unavailable")
)

// Store is the Redis-backed state of the gateway.
type Store struct {
	rdb      *redis.Client
	embedded *miniredis.Miniredis
	prefix   string
	// health tracks Redis's answers (health.go); probe is a client without the
	// fail-fast hook, for readiness checks.
	health health
	probe  *redis.Client
	// meter measures records for the tenants' usage counters (usage.go).
	meter Meter
	// clusterFile keeps the embedded store's cluster id across restarts.
	clusterFile string
	log         *slog.Logger

	// blocking serves blocking reads (live event streams) on connections of its own.
	blockingOnce sync.Once
	blocking     *redis.Client
}

// Options configure Open.
type Options struct {
	// URL is a redis:// URL; empty starts the embedded in-process store.
	URL string
	// Prefix namespaces every key (default "sg:"), so that tests can share one server.
	Prefix string
	// ClusterFile is where the embedded store keeps its cluster id (ClusterID) across
	// restarts; empty uses DefaultClusterFile(Prefix). Unused with Redis.
	ClusterFile string
	Logger      *slog.Logger
}

// Open connects to Redis, or starts the embedded store when no URL is given.
func Open(ctx context.Context, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Store{prefix: opts.Prefix, log: log}
	if s.prefix == "" {
		s.prefix = "sg:"
	}
	url := opts.URL
	if url == "" {
		// Every local user can connect to a loopback port, and the store holds every
		// token: it takes a password that only this process knows.
		password, err := randomPassword()
		if err != nil {
			return nil, fmt.Errorf("start embedded store: %w", err)
		}
		m := miniredis.NewMiniRedis()
		m.RequireAuth(password)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start embedded store: %w", err)
		}
		s.embedded = m
		url = "redis://:" + password + "@" + m.Addr()
		s.clusterFile = opts.ClusterFile
		if s.clusterFile == "" {
			s.clusterFile = DefaultClusterFile(s.prefix)
		}
		log.Info("no Redis configured: using the embedded in-process store (state is lost when the gateway stops)", "addr", m.Addr())
	}
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	// Tight deadlines: a frozen Redis must cost a request about a second, not many
	// (health.go). One retry covers a pooled connection that died with a Redis restart.
	ro.DialTimeout = dialTimeout
	ro.ReadTimeout = CommandTimeout
	ro.WriteTimeout = CommandTimeout
	ro.PoolTimeout = poolTimeout
	ro.MaxRetries = 1
	ro.MinRetryBackoff, ro.MaxRetryBackoff = 8*time.Millisecond, 64*time.Millisecond
	ro.PoolSize = 64
	ro.MinIdleConns = 4
	probeOpts := *ro
	probeOpts.PoolSize, probeOpts.MinIdleConns, probeOpts.MaxRetries = 2, 0, 0
	s.probe = redis.NewClient(&probeOpts)
	s.rdb = redis.NewClient(ro)
	s.rdb.AddHook(healthHook{&s.health})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		// Not fatal: the gateway starts and answers 503 until Redis comes back.
		log.Warn("redis does not answer yet; requests get 503 until it does", "addr", ro.Addr, "err", err)
	} else if opts.URL != "" {
		log.Info("connected to redis", "addr", ro.Addr)
	}
	return s, nil
}

// randomPassword returns 32 random bytes in hex.
func randomPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Client exposes the Redis client for packages that keep their own keys (pools, plugins).
func (s *Store) Client() *redis.Client { return s.rdb }

// Key returns a namespaced key.
func (s *Store) Key(parts ...string) string { return s.prefix + strings.Join(parts, ":") }

// Embedded reports whether the in-process store is in use.
func (s *Store) Embedded() bool { return s.embedded != nil }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error { return wrap(s.rdb.Ping(ctx).Err()) }

// blockingClient returns the client for blocking reads: the same server, its own pool.
func (s *Store) blockingClient() *redis.Client {
	s.blockingOnce.Do(func() {
		o := *s.rdb.Options()
		o.PoolSize, o.MinIdleConns = 256, 0
		s.blocking = redis.NewClient(&o)
	})
	return s.blocking
}

// Close closes the clients and stops the embedded store.
func (s *Store) Close() error {
	s.blockingOnce.Do(func() {}) // no blocking client after Close
	if s.blocking != nil {
		_ = s.blocking.Close()
	}
	_ = s.probe.Close()
	err := s.rdb.Close()
	if s.embedded != nil {
		s.embedded.Close()
	}
	return err
}

// wrap turns connection failures into ErrUnavailable so the API answers 503.
func wrap(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// isConnectionMessage recognizes connection failures that reach us only as text.
func isConnectionMessage(msg string) bool {
	for _, s := range []string{"connection refused", "connection reset", "EOF", "LOADING", "broken pipe", "i/o timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
