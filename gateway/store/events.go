package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event is one entry of a tenant's event stream (audit and activity). The same shape is
// handed to tenants' plugins (see plugins/ABI.md).
type Event struct {
	ID        string         `json:"id,omitempty"`
	Type      string         `json:"type"`
	Tenant    string         `json:"tenant"`
	SandboxID string         `json:"sandboxId,omitempty"`
	Time      time.Time      `json:"time"`
	Data      map[string]any `json:"data,omitempty"`
}

// eventStreamMax bounds each tenant's stream; older entries are trimmed approximately.
const eventStreamMax = 100000

func (s *Store) eventStream(tenant string) string { return s.Key("events", tenant) }

// AppendEvent adds ev to its tenant's stream and returns the stream id.
func (s *Store) AppendEvent(ctx context.Context, ev Event) (string, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("encode event: %w", err)
	}
	id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.eventStream(ev.Tenant),
		MaxLen: eventStreamMax,
		Approx: true,
		Values: []any{"type", ev.Type, "json", body},
	}).Result()
	return id, wrap(err)
}

// ReadEvents returns up to count events of tenant after the stream id after ("" = from the start).
func (s *Store) ReadEvents(ctx context.Context, tenant, after string, count int64) ([]Event, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := s.rdb.XRangeN(ctx, s.eventStream(tenant), start, "+", count).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		var ev Event
		if str, ok := m.Values["json"].(string); ok && json.Unmarshal([]byte(str), &ev) == nil {
			ev.ID = m.ID
			out = append(out, ev)
		}
	}
	return out, nil
}
