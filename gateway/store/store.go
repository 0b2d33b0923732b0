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
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Errors callers may inspect.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("concurrent update")
	ErrUnavailable = errors.New("store unavailable")
)

// Store is the Redis-backed state of the gateway. Its keys are laid out for Redis
// Cluster (layout.go): every script and transaction touches one hash slot.
type Store struct {
	rdb      redis.UniversalClient
	embedded *miniredis.Miniredis
	prefix   string
	// health tracks Redis's answers (health.go); probe is a client without the
	// fail-fast hook, for readiness checks.
	health health
	probe  redis.UniversalClient
	// newClient makes another client of the same server(s) with poolSize connections.
	newClient func(poolSize int) redis.UniversalClient
	cluster   bool
	// locs caches which tenant's slot holds a sandbox or batch id (layout.go).
	locs locCache
	// warm holds the warm records this process added, for claims (pools.go).
	warm warmCache
	// active caches the tenants already added to the active-tenants set.
	active sync.Map
	// epoch is the store's epoch as last seen, which tells a store loss (loss.go).
	epoch epochState
	// scannedClean is set once this process scanned for old-layout keys and found none.
	scannedClean atomic.Bool
	// meter measures records for the tenants' usage counters (usage.go).
	meter Meter
	// dir is the embedded store's directory, which keeps its cluster id across
	// restarts (embeddeddir.go); nil with Redis, or when no directory could be had.
	dir *embeddedDir
	log *slog.Logger

	// blocking serves blocking reads (live event streams) on connections of its own.
	blockingOnce sync.Once
	blocking     redis.UniversalClient
}

// Options configure Open.
type Options struct {
	// URL is a redis:// URL; empty starts the embedded in-process store.
	URL string
	// Prefix namespaces every key (default "sg:"), so that tests can share one server.
	Prefix string
	// Dir is the embedded store's directory, where it keeps its cluster id (ClusterID)
	// across restarts; one running gateway holds it at a time. Empty takes the first
	// free slot under DefaultDir(Prefix). Unused with Redis.
	Dir string
	// Cluster treats URL as a seed of a Redis Cluster (redis://host:port, more seeds as
	// ?addr=host:port); every script and transaction of the store stays on one slot.
	Cluster bool
	Logger  *slog.Logger
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
	if strings.ContainsAny(s.prefix, "{}") {
		// A brace in the prefix would become every key's hash tag.
		return nil, fmt.Errorf("redis prefix %q: must not contain { or }", s.prefix)
	}
	if opts.Cluster && opts.URL == "" {
		return nil, fmt.Errorf("redis cluster: needs a redis URL (the embedded store is one server)")
	}
	if opts.Cluster {
		return s.openCluster(ctx, opts.URL)
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
		if opts.Dir != "" {
			// A directory the operator named is this store's alone.
			if s.dir, err = claimDir(opts.Dir); err != nil {
				m.Close()
				return nil, err
			}
		} else if s.dir, err = claimDefaultDir(s.prefix); err != nil {
			// Without a directory the id lives only as long as this process: a restart
			// then leaves this run's sandboxes alone (neither adopted nor removed).
			log.Warn("cannot keep the embedded store's cluster id; a restart will not recognise this run's sandboxes", "err", err)
		}
		s.embedded = m
		url = "redis://:" + password + "@" + m.Addr()
		log.Info("no Redis configured: using the embedded in-process store (state is lost when the gateway stops)", "addr", m.Addr())
	}
	ro, err := redis.ParseURL(withDeadlines(url))
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", withoutURL(err))
	}
	s.connect(func(poolSize, minIdle, retries int) redis.UniversalClient {
		o := *ro
		o.PoolSize, o.MinIdleConns, o.MaxRetries = poolSize, minIdle, retries
		return redis.NewClient(&o)
	})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		// Not fatal: the gateway starts and answers 503 until Redis comes back.
		log.Warn("redis does not answer yet; requests get 503 until it does", "addr", ro.Addr, "err", err)
	} else if opts.URL != "" {
		log.Info("connected to redis", "addr", ro.Addr)
	}
	return s, nil
}

// openCluster connects to a Redis Cluster through the seed(s) in url.
func (s *Store) openCluster(ctx context.Context, url string) (*Store, error) {
	co, err := redis.ParseClusterURL(withDeadlines(url))
	if err != nil {
		return nil, fmt.Errorf("parse redis cluster url: %w", withoutURL(err))
	}
	s.cluster = true
	s.connect(func(poolSize, minIdle, retries int) redis.UniversalClient {
		o := *co
		o.PoolSize, o.MinIdleConns, o.MaxRetries = poolSize, minIdle, retries
		return redis.NewClusterClient(&o)
	})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.log.Warn("redis cluster does not answer yet; requests get 503 until it does", "addrs", co.Addrs, "err", err)
	} else {
		s.log.Info("connected to redis cluster", "addrs", co.Addrs)
	}
	return s, nil
}

// withDeadlines sets the store's deadlines on a redis:// URL as the query options that
// ParseURL and ParseClusterURL both read, in place of any the URL had. They are tight: a
// frozen Redis must cost a request about a second, not many (health.go). An unparsable
// URL is returned as it is, for the parser to refuse.
func withDeadlines(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("dial_timeout", dialTimeout.String())
	q.Set("read_timeout", CommandTimeout.String())
	q.Set("write_timeout", CommandTimeout.String())
	q.Set("pool_timeout", poolTimeout.String())
	q.Set("min_retry_backoff", "8ms")
	q.Set("max_retry_backoff", "64ms")
	u.RawQuery = q.Encode()
	return u.String()
}

// withoutURL drops the URL from a url.Parse error, which quotes it whole: the store's
// URL may carry the Redis password, and Open's error reaches the logs.
func withoutURL(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// connect makes the store's clients with newClient, which builds one of the configured
// server(s) with a pool of poolSize connections (minIdle kept open) and retries retries:
// the main client (64 connections, one retry: that covers a pooled connection that died
// with a Redis restart), the readiness probe (two connections, no fail-fast hook) and
// the factory of blocking readers' clients.
func (s *Store) connect(newClient func(poolSize, minIdle, retries int) redis.UniversalClient) {
	s.probe = newClient(2, 0, 0)
	s.rdb = newClient(64, 4, 1)
	s.rdb.AddHook(healthHook{&s.health})
	s.newClient = func(n int) redis.UniversalClient { return newClient(n, 0, 1) }
}

// Cluster reports whether the store runs on a Redis Cluster.
func (s *Store) Cluster() bool { return s.cluster }

// randomPassword returns 32 random bytes in hex.
func randomPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Client exposes the Redis client for packages that keep their own keys (pools, plugins).
// On a cluster it is a cluster client: a script or transaction of theirs must keep to one
// slot too.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Key returns a namespaced key.
func (s *Store) Key(parts ...string) string { return s.prefix + strings.Join(parts, ":") }

// Embedded reports whether the in-process store is in use.
func (s *Store) Embedded() bool { return s.embedded != nil }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error { return wrap(s.rdb.Ping(ctx).Err()) }

// blockingClient returns the client for blocking reads: the same server, its own pool.
func (s *Store) blockingClient() redis.UniversalClient {
	s.blockingOnce.Do(func() {
		s.blocking = s.newClient(256)
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
	s.dir.release()
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
	// CLUSTERDOWN and TRYAGAIN: a Redis Cluster without a primary for a slot, or moving one.
	for _, s := range []string{"connection refused", "connection reset", "EOF", "LOADING", "broken pipe", "i/o timeout", "CLUSTERDOWN", "TRYAGAIN"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
