package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batch is a group of sandboxes handed out by one request.
type Batch struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Count     int       `json:"count"`
	PoolRef   string    `json:"poolRef,omitempty"`
	Members   []string  `json:"members"`
	CreatedAt time.Time `json:"createdAt"`
	// Queued maps each member still to be made to the gateway making it (GetBatch).
	Queued map[string]string `json:"-"`
}

// MemberError records why one member of a batch failed.
type MemberError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// A batch lives in its tenant's slot (layout.go), found by id through its locator.
func (s *Store) batchKey(tenant, id string) string  { return s.tkey(tenant, "batch", id) }
func (s *Store) tenantBatches(tenant string) string { return s.tkey(tenant, "batches") }
func (s *Store) openBatches(tenant string) string   { return s.tkey(tenant, "batches", "open") }

// batchKeyOf locates batch id and returns its key.
func (s *Store) batchKeyOf(ctx context.Context, id string) (string, error) {
	t, err := s.locate(ctx, locBatch, id)
	if err != nil {
		return "", err
	}
	return s.batchKey(t, id), nil
}

// PutBatch writes a batch record; its member errors live beside it and are kept.
func (s *Store) PutBatch(ctx context.Context, b *Batch) error {
	return s.PutBatchWork(ctx, b, nil, "", nil)
}

// PutBatchWork writes a batch record together with the durable work of its members
// still to be made: work is the (gateway-defined) description of how to make them,
// owner the gateway making them now. Each queued member stays listed until it is
// made (FinishMember) or fails (SetMemberError); a gateway whose owner's heartbeat
// lapsed takes it over (TakeMember), so no member vanishes with its gateway.
func (s *Store) PutBatchWork(ctx context.Context, b *Batch, work []byte, owner string, queued []string) error {
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if err := s.markActive(ctx, b.Tenant); err != nil {
		return err
	}
	if _, err := s.claimLocator(ctx, locBatch, b.ID, b.Tenant); err != nil {
		return err
	}
	key := s.batchKey(b.Tenant, b.ID)
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, key, "json", body, "tenant", b.Tenant)
	if len(queued) > 0 {
		fields := []any{"work", work}
		for _, m := range queued {
			fields = append(fields, "queued:"+m, owner)
		}
		pipe.HSet(ctx, key, fields...)
		pipe.SAdd(ctx, s.openBatches(b.Tenant), b.ID)
	}
	pipe.ZAdd(ctx, s.tenantBatches(b.Tenant), redis.Z{Score: float64(b.CreatedAt.UnixMilli()), Member: b.ID})
	_, err = pipe.Exec(ctx)
	return wrap(err)
}

// OpenBatches lists the batches with members still queued, of every tenant.
func (s *Store) OpenBatches(ctx context.Context) ([]string, error) {
	tenants, err := s.activeTenants(ctx)
	if err != nil || len(tenants) == 0 {
		return nil, err
	}
	cmds, err := perTenant(ctx, s, tenants, func(p redis.Pipeliner, t string) *redis.StringSliceCmd {
		return p.SMembers(ctx, s.openBatches(t))
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for i, t := range tenants {
		for _, id := range cmds[i].Val() {
			s.locs.put(locBatch, id, t)
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// BatchWork returns the work description stored with a batch.
func (s *Store) BatchWork(ctx context.Context, id string) ([]byte, error) {
	key, err := s.batchKeyOf(ctx, id)
	if err != nil {
		return nil, err
	}
	w, err := s.rdb.HGet(ctx, key, "work").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("batch %s work: %w", id, ErrNotFound)
	}
	return w, wrap(err)
}

var settleMemberScript = newOpScript(`
if redis.call('HGET', KEYS[1], 'queued:' .. ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], 'queued:' .. ARGV[1])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'error:' .. ARGV[1], ARGV[3]) end
return 1
`)

// FinishMember records that gateway owner made a queued member. It reports false when
// the member is no longer owner's (another gateway took it over).
func (s *Store) FinishMember(ctx context.Context, batchID, member, owner string) (bool, error) {
	key, err := s.batchKeyOf(ctx, batchID)
	if err != nil {
		return false, err
	}
	n, err := settleMemberScript.Run(ctx, s, []string{key}, member, owner, "").Int()
	return n == 1, wrap(err)
}

// FailMember records why gateway owner could not make a queued member, if the member
// is still owner's.
func (s *Store) FailMember(ctx context.Context, batchID, member, owner string, e MemberError) (bool, error) {
	body, _ := json.Marshal(e)
	key, err := s.batchKeyOf(ctx, batchID)
	if err != nil {
		return false, err
	}
	n, err := settleMemberScript.Run(ctx, s, []string{key}, member, owner, body).Int()
	return n == 1, wrap(err)
}

var takeMemberScript = newOpScript(`
if redis.call('HGET', KEYS[1], 'queued:' .. ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'queued:' .. ARGV[1], ARGV[3])
return redis.call('HINCRBY', KEYS[1], 'takeovers:' .. ARGV[1], 1)
`)

// TakeMember moves a queued member from gateway from (gone) to gateway to, if from
// still holds it; it returns how many times the member has been taken over so far,
// 0 when someone else got there first.
func (s *Store) TakeMember(ctx context.Context, batchID, member, from, to string) (int, error) {
	key, err := s.batchKeyOf(ctx, batchID)
	if err != nil {
		return 0, err
	}
	n, err := takeMemberScript.Run(ctx, s, []string{key}, member, from, to).Int()
	return n, wrap(err)
}

// CloseBatch takes a batch off the open list once none of its members is queued.
func (s *Store) CloseBatch(ctx context.Context, id string) error {
	t, err := s.locate(ctx, locBatch, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return wrap(s.rdb.SRem(ctx, s.openBatches(t), id).Err())
}

// SetMemberError records a failed member; it is no longer queued.
func (s *Store) SetMemberError(ctx context.Context, batchID, member string, e MemberError) error {
	body, _ := json.Marshal(e)
	key, err := s.batchKeyOf(ctx, batchID)
	if err != nil {
		return err
	}
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, key, "error:"+member, body)
	pipe.HDel(ctx, key, "queued:"+member)
	_, err = pipe.Exec(ctx)
	return wrap(err)
}

// GetBatch returns a batch and the errors of its failed members.
func (s *Store) GetBatch(ctx context.Context, id string) (*Batch, map[string]MemberError, error) {
	key, err := s.batchKeyOf(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	all, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, nil, wrap(err)
	}
	body, ok := all["json"]
	if !ok {
		return nil, nil, fmt.Errorf("batch %s: %w", id, ErrNotFound)
	}
	var b Batch
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		return nil, nil, fmt.Errorf("decode batch: %w", err)
	}
	errs := map[string]MemberError{}
	b.Queued = map[string]string{}
	for k, v := range all {
		if m, ok := strings.CutPrefix(k, "queued:"); ok {
			b.Queued[m] = v
		}
		if len(k) > 6 && k[:6] == "error:" {
			var e MemberError
			if json.Unmarshal([]byte(v), &e) == nil {
				errs[k[6:]] = e
			}
		}
	}
	return &b, errs, nil
}

// DeleteBatch removes the batch record (not its members).
func (s *Store) DeleteBatch(ctx context.Context, b *Batch) error {
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.batchKey(b.Tenant, b.ID))
	pipe.SRem(ctx, s.openBatches(b.Tenant), b.ID)
	pipe.ZRem(ctx, s.tenantBatches(b.Tenant), b.ID)
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return wrap(err)
	}
	return s.dropLocator(ctx, locBatch, b.ID, b.Tenant)
}
