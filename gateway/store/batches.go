package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
}

// MemberError records why one member of a batch failed.
type MemberError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (s *Store) batchKey(id string) string { return s.Key("batch", id) }

// PutBatch writes a batch record; its member errors live beside it and are kept.
func (s *Store) PutBatch(ctx context.Context, b *Batch) error {
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, s.batchKey(b.ID), "json", body, "tenant", b.Tenant)
	pipe.ZAdd(ctx, s.Key("tenant", b.Tenant, "batches"), redis.Z{Score: float64(b.CreatedAt.UnixMilli()), Member: b.ID})
	_, err = pipe.Exec(ctx)
	return wrap(err)
}

// SetMemberError records a failed member.
func (s *Store) SetMemberError(ctx context.Context, batchID, member string, e MemberError) error {
	body, _ := json.Marshal(e)
	return wrap(s.rdb.HSet(ctx, s.batchKey(batchID), "error:"+member, body).Err())
}

// GetBatch returns a batch and the errors of its failed members.
func (s *Store) GetBatch(ctx context.Context, id string) (*Batch, map[string]MemberError, error) {
	all, err := s.rdb.HGetAll(ctx, s.batchKey(id)).Result()
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
	for k, v := range all {
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
	pipe.Del(ctx, s.batchKey(b.ID))
	pipe.ZRem(ctx, s.Key("tenant", b.Tenant, "batches"), b.ID)
	_, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return wrap(err)
}

// GetSandboxes reads several records in one round trip; missing ones are skipped.
func (s *Store) GetSandboxes(ctx context.Context, ids []string) ([]*Sandbox, error) {
	return s.getMany(ctx, ids)
}
