package eventlog

import "github.com/sandgate/sandgate/gateway/store"

// Host is what the event feature needs of the gateway's core. The core implements it;
// the store and the logger the Manager is given directly.
type Host interface {
	// PublishEvent hands an event, as it is first recorded, to its tenant's live
	// subscribers (the on_event plugins). It must not block.
	PublishEvent(ev store.Event)
	// FlushActivity writes the proxied requests' activity the access feature gathered;
	// the batched writer calls it at each flush.
	FlushActivity()
}
