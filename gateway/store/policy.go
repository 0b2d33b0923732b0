package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// The policy API keeps its Rego overrides in one hash (module name → source) and tells
// the other gateways to reload them on a pub/sub channel.

func (s *Store) policyKey() string     { return s.Key("policy", "overrides") }
func (s *Store) policyChannel() string { return s.Key("policy", "reload") }

// PolicyOverrides returns the stored override modules (empty when there are none).
func (s *Store) PolicyOverrides(ctx context.Context) (map[string]string, error) {
	m, err := s.rdb.HGetAll(ctx, s.policyKey()).Result()
	return m, wrap(err)
}

// SetPolicyOverrides replaces every stored override at once and tells every gateway.
func (s *Store) SetPolicyOverrides(ctx context.Context, modules map[string]string) error {
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.policyKey())
	if len(modules) > 0 {
		pipe.HSet(ctx, s.policyKey(), modules)
	}
	pipe.Publish(ctx, s.policyChannel(), "reload")
	_, err := pipe.Exec(ctx)
	return wrap(err)
}

// SubscribePolicy calls ready once the subscription holds (so that a reload after it
// misses nothing), then fn on every reload notice, until ctx ends or the connection fails.
func (s *Store) SubscribePolicy(ctx context.Context, ready func(), fn func()) error {
	return s.subscribe(ctx, s.policyChannel(), ready, func(string) { fn() })
}

// subscribe runs one pub/sub subscription: ready after it is confirmed, then fn per message.
func (s *Store) subscribe(ctx context.Context, channel string, ready func(), fn func(payload string)) error {
	sub := s.rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return wrap(err)
	}
	if ready != nil {
		ready()
	}
	ch := sub.Channel(redis.WithChannelSize(1024))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg, ok := <-ch:
			if !ok {
				return ErrUnavailable
			}
			fn(msg.Payload)
		}
	}
}
