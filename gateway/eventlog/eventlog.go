// Package eventlog is the gateway's feature of tenants' event and audit streams. Every
// other part of the gateway records events through the core, which hands them here: at
// once, before the caller answers (emit.go), or through a queue a batched writer empties
// into Redis, keeping them through an outage (queue.go); each event reaches its
// tenant's live subscribers when first recorded. It answers the readers: a page of a
// tenant's events with filters, or the events followed live (read.go). It keeps the
// tenant audit stream apart: the records of plugins, the credential vault and named
// volumes, queued and written in batches, read page by page and followed (audit.go). A
// Manager owns both queues and their writers. It reaches the core only through Host
// (host.go): the live subscribers an event is handed to and the access feature's
// activity flushed with each batch; the store and the logger it is given directly. It
// imports neither package gateway nor gateway/api.
package eventlog

import (
	"log/slog"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/store"
)

// Manager owns the event queue and its batched writer, the audit queue and its writer,
// and the reads of both streams. It is safe for concurrent use.
type Manager struct {
	store *store.Store
	host  Host
	log   *slog.Logger

	// events holds the events waiting for the batched writer (queue.go).
	events eventQueue
	// audit holds the records waiting for the audit writer (audit.go).
	audit auditQueue

	// group runs the event and audit writers.
	group spawn.Group
}

// New builds a Manager; Start runs its event writer, the audit writer starts with the
// first audit record or reader.
func New(st *store.Store, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{store: st, host: host, log: log,
		events: eventQueue{wake: make(chan struct{}, 1)}}
}

// Start runs the batched event writer.
func (m *Manager) Start() { m.group.Go(m.runEventWriter) }

// Stop ends the writers, each after a last flush of what is queued, and waits for them.
func (m *Manager) Stop() { m.group.Stop() }
