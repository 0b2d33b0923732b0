// Changes: a pub/sub channel on which a gateway announces that a sandbox record (or an
// API key's binding) changed, so that every gateway's record cache and live watches
// follow.

package store

import (
	"context"
)

func (s *Store) changesChannel() string { return s.Key("changes") }

// PublishChange tells every gateway that sandbox id changed (or went away).
func (s *Store) PublishChange(ctx context.Context, id string) error {
	return wrap(s.rdb.Publish(ctx, s.changesChannel(), id).Err())
}

// SubscribeChanges calls fn with each changed sandbox id until ctx ends or the
// connection fails.
func (s *Store) SubscribeChanges(ctx context.Context, fn func(id string)) error {
	return s.subscribe(ctx, s.changesChannel(), nil, fn)
}

// SubscribeChangesReady is SubscribeChanges that calls ready once the subscription
// holds: a reader that lists after ready misses no change.
func (s *Store) SubscribeChangesReady(ctx context.Context, ready func(), fn func(id string)) error {
	return s.subscribe(ctx, s.changesChannel(), ready, fn)
}
