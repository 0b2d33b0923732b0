package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store keeps tenants' plugins (module bytes and config) in Redis so that
// every gateway replica loads the same ones. Each write bumps a revision
// counter and publishes a Change; replicas Watch the changes and Apply them
// to their Host, and can compare Revision to catch up after a disconnect.
//
// Keys, under the prefix:
//
//	{plugins}:plugin:<tenant>:<name>  hash: version, hash, config, module, updatedAt, revision
//	{plugins}:plugins:<tenant>        set of the tenant's plugin names
//	{plugins}:plugins:tenants         set of tenants with plugins
//	{plugins}:plugins:revision        counter, bumped by every Put and Delete
//	plugins:changes                   pub/sub channel of Change messages
//
// ({plugins} is a Redis Cluster hash tag: every plugin key is on one slot.)
type Store struct {
	rdb    redis.UniversalClient
	prefix string
}

// StoredPlugin is one plugin as stored.
type StoredPlugin struct {
	Tenant  string `json:"tenant"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Hash is the SHA-256 of Module, hex.
	Hash   string `json:"hash"`
	Config Config `json:"config"`
	// Module is empty in List results, which leave the bytes in Redis.
	Module    []byte    `json:"-"`
	UpdatedAt time.Time `json:"updatedAt"`
	// Revision is the store revision of the write that produced this.
	Revision int64 `json:"revision"`
}

// Change says that a tenant's plugin was written or deleted.
type Change struct {
	Tenant   string `json:"tenant"`
	Name     string `json:"name"`
	Revision int64  `json:"revision"`
	Deleted  bool   `json:"deleted,omitempty"`
}

// NewStore returns a store using rdb with keys under prefix (for example
// "sandgate:").
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix}
}

// Every key carries the hash tag {plugins}, so that the scripts, which touch several,
// stay on one slot of a Redis Cluster.
func (s *Store) pluginKey(tenant, name string) string {
	return s.prefix + "{plugins}:plugin:" + url.PathEscape(tenant) + ":" + name
}
func (s *Store) tenantKey(tenant string) string {
	return s.prefix + "{plugins}:plugins:" + url.PathEscape(tenant)
}
func (s *Store) tenantsKey() string  { return s.prefix + "{plugins}:plugins:tenants" }
func (s *Store) revisionKey() string { return s.prefix + "{plugins}:plugins:revision" }
func (s *Store) channel() string     { return s.prefix + "plugins:changes" }

// putScript writes the hash and the indexes and bumps the revision in one
// step, so a reader never sees a plugin without its index entry.
var putScript = redis.NewScript(`
local rev = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'hash', ARGV[2], 'config', ARGV[3], 'module', ARGV[4], 'updatedAt', ARGV[5], 'revision', rev)
redis.call('SADD', KEYS[2], ARGV[6])
redis.call('SADD', KEYS[3], ARGV[7])
return rev
`)

var deleteScript = redis.NewScript(`
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('SCARD', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], ARGV[2]) end
return redis.call('INCR', KEYS[4])
`)

// Put stores p (replacing any plugin of the same tenant and name) and
// announces the change. It does not validate the module: call
// Host.Validate first. It returns the new revision.
func (s *Store) Put(ctx context.Context, p Plugin) (int64, error) {
	if err := checkIdentity(p.Tenant, p.Name); err != nil {
		return 0, err
	}
	config, err := json.Marshal(p.Config)
	if err != nil {
		return 0, fmt.Errorf("plugins: store: encode config: %w", err)
	}
	hash := moduleHash(p.Module)
	version := p.Version
	if version == "" {
		version = hash
	}
	keys := []string{s.pluginKey(p.Tenant, p.Name), s.tenantKey(p.Tenant), s.tenantsKey(), s.revisionKey()}
	rev, err := putScript.Run(ctx, s.rdb, keys,
		version, hash, config, p.Module, time.Now().UTC().Format(time.RFC3339Nano), p.Name, p.Tenant).Int64()
	if err != nil {
		return 0, fmt.Errorf("plugins: store: put %s/%s: %w", p.Tenant, p.Name, err)
	}
	return rev, s.publish(ctx, Change{Tenant: p.Tenant, Name: p.Name, Revision: rev})
}

// Delete removes a stored plugin and announces it; ErrNotFound if absent.
func (s *Store) Delete(ctx context.Context, tenant, name string) (int64, error) {
	keys := []string{s.pluginKey(tenant, name), s.tenantKey(tenant), s.tenantsKey(), s.revisionKey()}
	rev, err := deleteScript.Run(ctx, s.rdb, keys, name, tenant).Int64()
	if err != nil {
		return 0, fmt.Errorf("plugins: store: delete %s/%s: %w", tenant, name, err)
	}
	if rev == 0 {
		return 0, newError(CodeNotFound, nil, "no plugin %q for this tenant", name)
	}
	return rev, s.publish(ctx, Change{Tenant: tenant, Name: name, Revision: rev, Deleted: true})
}

func (s *Store) publish(ctx context.Context, c Change) error {
	msg, _ := json.Marshal(c)
	if err := s.rdb.Publish(ctx, s.channel(), msg).Err(); err != nil {
		return fmt.Errorf("plugins: store: announce change: %w", err)
	}
	return nil
}

// Get returns one stored plugin with its module; ErrNotFound if absent.
func (s *Store) Get(ctx context.Context, tenant, name string) (StoredPlugin, error) {
	vals, err := s.rdb.HGetAll(ctx, s.pluginKey(tenant, name)).Result()
	if err != nil {
		return StoredPlugin{}, fmt.Errorf("plugins: store: get %s/%s: %w", tenant, name, err)
	}
	if len(vals) == 0 {
		return StoredPlugin{}, newError(CodeNotFound, nil, "no plugin %q for this tenant", name)
	}
	return decodeStored(tenant, name, vals, true)
}

// List returns the tenant's stored plugins without their module bytes,
// sorted by name.
func (s *Store) List(ctx context.Context, tenant string) ([]StoredPlugin, error) {
	names, err := s.rdb.SMembers(ctx, s.tenantKey(tenant)).Result()
	if err != nil {
		return nil, fmt.Errorf("plugins: store: list %s: %w", tenant, err)
	}
	slices.Sort(names)
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(names))
	for i, name := range names {
		cmds[i] = pipe.HMGet(ctx, s.pluginKey(tenant, name), "version", "hash", "config", "updatedAt", "revision")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("plugins: store: list %s: %w", tenant, err)
	}
	out := make([]StoredPlugin, 0, len(names))
	for i, name := range names {
		fields := cmds[i].Val()
		vals := map[string]string{}
		for j, f := range []string{"version", "hash", "config", "updatedAt", "revision"} {
			if str, ok := fields[j].(string); ok {
				vals[f] = str
			}
		}
		if len(vals) == 0 {
			continue // deleted between SMEMBERS and HMGET
		}
		p, err := decodeStored(tenant, name, vals, false)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Tenants returns the tenants that have stored plugins.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	tenants, err := s.rdb.SMembers(ctx, s.tenantsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("plugins: store: tenants: %w", err)
	}
	slices.Sort(tenants)
	return tenants, nil
}

// Revision returns the store's revision: it grows with every write, so a
// replica that saw revision r has missed nothing while Revision is still r.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	rev, err := s.rdb.Get(ctx, s.revisionKey()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("plugins: store: revision: %w", err)
	}
	return rev, nil
}

func decodeStored(tenant, name string, vals map[string]string, withModule bool) (StoredPlugin, error) {
	p := StoredPlugin{Tenant: tenant, Name: name, Version: vals["version"], Hash: vals["hash"]}
	if err := json.Unmarshal([]byte(vals["config"]), &p.Config); err != nil {
		return p, fmt.Errorf("plugins: store: %s/%s: config: %w", tenant, name, err)
	}
	p.UpdatedAt, _ = time.Parse(time.RFC3339Nano, vals["updatedAt"])
	p.Revision, _ = strconv.ParseInt(vals["revision"], 10, 64)
	if withModule {
		p.Module = []byte(vals["module"])
	}
	return p, nil
}

// Watch calls fn for every change announced until ctx is done, and returns
// ctx's error then. Announcements made while the connection is down are
// lost: compare Revision after reconnecting (or periodically) and Sync.
func (s *Store) Watch(ctx context.Context, fn func(Change)) error {
	sub := s.rdb.Subscribe(ctx, s.channel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		return fmt.Errorf("plugins: store: subscribe: %w", err)
	}
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg, ok := <-ch:
			if !ok {
				return errors.New("plugins: store: subscription closed")
			}
			var c Change
			if err := json.Unmarshal([]byte(msg.Payload), &c); err == nil {
				fn(c)
			}
		}
	}
}

// Apply brings h in line with the store for one plugin: it loads the stored
// version unless h already runs it, or removes the plugin when the store no
// longer has it.
func (s *Store) Apply(ctx context.Context, h *Host, tenant, name string) error {
	p, err := s.Get(ctx, tenant, name)
	if errors.Is(err, ErrNotFound) {
		if err := h.Remove(tenant, name); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	for _, info := range h.List(tenant) {
		if info.Name == name && info.Version == p.Version && info.Hash == p.Hash {
			return nil // already running this version
		}
	}
	return h.Load(ctx, Plugin{Tenant: tenant, Name: name, Version: p.Version, Module: p.Module, Config: p.Config})
}

// Sync applies every stored plugin of every tenant to h, and removes from h
// the plugins of those tenants that the store no longer has. It returns the
// revision it synced from and the errors of the plugins that failed to load
// (the others are loaded regardless).
func (s *Store) Sync(ctx context.Context, h *Host) (int64, error) {
	rev, err := s.Revision(ctx)
	if err != nil {
		return 0, err
	}
	tenants, err := s.Tenants(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, tenant := range tenants {
		stored, err := s.List(ctx, tenant)
		if err != nil {
			return 0, err
		}
		keep := map[string]bool{}
		for _, p := range stored {
			keep[p.Name] = true
			if err := s.Apply(ctx, h, tenant, p.Name); err != nil {
				errs = append(errs, fmt.Errorf("%s/%s: %w", tenant, p.Name, err))
			}
		}
		for _, info := range h.List(tenant) {
			if !keep[info.Name] {
				_ = h.Remove(tenant, info.Name)
			}
		}
	}
	return rev, errors.Join(errs...)
}
