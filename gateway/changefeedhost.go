package gateway

import (
	"context"
	"strings"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/changefeed"
	"github.com/sandgate/sandgate/gateway/store"
)

// Watcher receives the ids of changed sandboxes (changefeed.Watcher), and WatchFilter
// narrows a live list (changefeed.Filter).
type (
	Watcher     = changefeed.Watcher
	WatchFilter = changefeed.Filter
)

// Changes is the change feed: gateway/api watches live lists through it.
func (s *Service) Changes() *changefeed.Manager { return s.feed }

// Route returns the record a proxied request for sandbox id goes to, from the route
// cache when it is fresh, and from the last confirmed record while Redis is unreachable
// (changefeed.Manager.Route). It does not check who asks.
func (s *Service) Route(ctx context.Context, id string) (*store.Sandbox, error) {
	return s.feed.Route(ctx, id)
}

// changefeedHost is the core as the change feed sees it (changefeed.Host).
type changefeedHost struct{ s *Service }

// Resubscribed has the API key bindings read again: their changes may have been missed.
func (h changefeedHost) Resubscribed() { h.s.access.KeyBindingsStale() }

// OtherChange hands an API key's change to the access feature.
func (h changefeedHost) OtherChange(id string) bool {
	keyID, ok := strings.CutPrefix(id, access.KeyChangePrefix)
	if ok {
		h.s.access.KeyChanged(keyID)
	}
	return ok
}

var _ changefeed.Host = changefeedHost{}
