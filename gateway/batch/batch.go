// Package batch is the gateway's feature of batches: N sandboxes of one template handed
// out at once, as many as a warm pool has claimed in one script and the rest started
// cold in the background (create.go); each batch read back with its members' states and,
// on request, their agent endpoints (read.go); deleted with its members (delete.go). The
// cold members are durable work: written with the batch under this gateway's heartbeat,
// so that another gateway makes them if this one dies (Resume). It reaches the core only
// through Host (host.go): the admission of a request, the claim, the cold create, the
// delete of one member and what the API shows of a sandbox; the store and the metrics it
// is given directly. It imports neither package gateway nor gateway/api.
//
// A Manager is generic in the core's create request (T, a batch's template) and its
// endpoint query (Q, how the caller reached the gateway), which it carries without
// reading them.
package batch

import (
	"context"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
)

// CodeNotFound answers a batch that does not exist or is another tenant's.
const CodeNotFound = "BATCH::NOT_FOUND"

// The batch API's vocabulary, declared once for the gateway and the Go SDK in apiproto:
// a Request of templates T, a View of a batch, one of its Members and their Summary.
type (
	Request[T any] = apiproto.BatchRequest[T]
	View           = apiproto.Batch
	Member         = apiproto.BatchMember
	Summary        = apiproto.BatchSummary
)

// Member sources, as a View shows them.
const (
	SourcePool = "pool"
	SourceCold = "cold"
)

// Config is what the feature needs of the gateway's settings.
type Config struct {
	// MaxSize is the largest count a request may ask for.
	MaxSize int
	// ColdConcurrency bounds the cold members started at once, per batch.
	ColdConcurrency int
	// ColdTimeout bounds the start of one cold member.
	ColdTimeout time.Duration
	// Owner names this gateway in the store's heartbeats: queued members are its work.
	Owner string
}

// Manager owns the batch API's operations and the cold starts of batch members. It is
// safe for concurrent use.
type Manager[T, Q any] struct {
	cfg     Config
	store   *store.Store
	metrics *metrics.Set
	host    Host[T, Q]
	log     *slog.Logger

	// group runs the cold members' starts.
	group spawn.Group
}

// New builds a Manager. ms may be nil (no series recorded).
func New[T, Q any](cfg Config, st *store.Store, ms *metrics.Set, host Host[T, Q], log *slog.Logger) *Manager[T, Q] {
	if log == nil {
		log = slog.Default()
	}
	if cfg.ColdConcurrency < 1 {
		cfg.ColdConcurrency = 1
	}
	return &Manager[T, Q]{cfg: cfg, store: st, metrics: ms, host: host, log: log}
}

// Stop lets no further cold member start and waits for those starting. Members left
// queued are this gateway's work in the store: a peer takes them over once its
// heartbeat ends.
func (m *Manager[T, Q]) Stop() { m.group.Stop() }

// background is the context of a cold member's start: it outlives the request that
// queued it, bounded by ColdTimeout.
func (m *Manager[T, Q]) background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.cfg.ColdTimeout)
}
