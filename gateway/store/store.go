// Package store keeps sandgate's shared state in Redis: sandbox records, the per-tenant
// index, the expiry schedule, leases and events. Every multi-key change is one Lua script,
// so that the embedded store (miniredis) and a real Redis run exactly the same commands.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start embedded store: %w", err)
		}
		s.embedded = m
		s.clusterFile = opts.ClusterFile
		if s.clusterFile == "" {
			s.clusterFile = DefaultClusterFile(s.prefix)
		}
		url = "redis://" + m.Addr()
		log.Info("no Redis configured: using the embedded in-process store (state is lost when the gateway stops)", "addr", m.Addr())
	}
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	ro.DialTimeout = 2 * time.Second
	ro.ReadTimeout = 3 * time.Second
	ro.WriteTimeout = 3 * time.Second
	ro.PoolSize = 64
	ro.MinIdleConns = 4
	s.rdb = redis.NewClient(ro)
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		// Not fatal: the gateway starts and answers 503 until Redis comes back.
		log.Warn("redis does not answer yet; requests get 503 until it does", "addr", ro.Addr, "err", err)
	} else if opts.URL != "" {
		log.Info("connected to redis", "addr", ro.Addr)
	}
	return s, nil
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
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, redis.ErrClosed) || strings.Contains(err.Error(), "connection refused") ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "LOADING") {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}
