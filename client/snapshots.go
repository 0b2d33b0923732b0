package sandgate

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/apiproto"
)

// Snapshot states.
const (
	SnapshotCreating = "Creating"
	SnapshotReady    = "Ready"
	SnapshotFailed   = "Failed"
	SnapshotDeleting = "Deleting"
)

// Snapshots as the gateway answers them (package apiproto documents each field).
type (
	// Snapshot is a kept copy of a sandbox's filesystem, from which new sandboxes start
	// (CreateRequest.SnapshotID) and which forks are made of.
	Snapshot = apiproto.Snapshot
	// SnapshotPage is one page of GET /v1/snapshots.
	SnapshotPage = apiproto.SnapshotPage
)

// SnapshotListOptions filter a snapshot list. Zero values ask for the server's defaults.
type SnapshotListOptions struct {
	SandboxID string   // only snapshots of this sandbox
	States    []string // any of these (case-insensitive)
	Page      int      // from 1
	PageSize  int      // 1–200
}

// CreateSnapshot starts a snapshot of a Running sandbox (name may be empty). The
// snapshot is answered Creating; WaitSnapshot waits until it is Ready.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID, name string) (*Snapshot, error) {
	var body any
	if name != "" {
		body = map[string]string{"name": name}
	}
	return call[Snapshot](ctx, c, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/snapshots", nil, body)
}

// GetSnapshot returns one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return call[Snapshot](ctx, c, http.MethodGet, "/snapshots/"+url.PathEscape(id), nil, nil)
}

// ListSnapshots returns one page of the caller's snapshots.
func (c *Client) ListSnapshots(ctx context.Context, opts SnapshotListOptions) (*SnapshotPage, error) {
	q := url.Values{}
	if opts.SandboxID != "" {
		q.Set("sandboxId", opts.SandboxID)
	}
	for _, s := range opts.States {
		q.Add("state", s)
	}
	if opts.Page > 0 {
		q.Set("page", strconv.Itoa(opts.Page))
	}
	if opts.PageSize > 0 {
		q.Set("pageSize", strconv.Itoa(opts.PageSize))
	}
	return call[SnapshotPage](ctx, c, http.MethodGet, "/snapshots", q, nil)
}

// DeleteSnapshot removes a snapshot; one a sandbox still runs from is refused with
// ErrSnapshotInUse.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/snapshots/"+url.PathEscape(id), nil, nil, nil)
}

// WaitSnapshot polls a snapshot until it is Ready; a Failed snapshot ends the wait
// with an error carrying its message.
func (c *Client) WaitSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	for {
		s, err := c.GetSnapshot(ctx, id)
		if err != nil {
			return nil, err
		}
		switch s.Status.State {
		case SnapshotReady:
			return s, nil
		case SnapshotFailed:
			return s, fmt.Errorf("sandgate: snapshot %s failed: %s", id, s.Status.Message)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// ForkRequest asks for Count copies of a Running sandbox, each with the source's files,
// env and egress policy and its own id, token and expiry.
type ForkRequest struct {
	Count    int               `json:"count"`
	Timeout  *int64            `json:"timeout,omitempty"` // seconds; nil = no expiry
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Fork snapshots a sandbox and starts a batch of copies from the snapshot; it is
// answered like CreateBatch (WaitBatch follows it). The snapshot stays listed while
// its copies use it.
func (c *Client) Fork(ctx context.Context, sandboxID string, req ForkRequest) (*Batch, error) {
	return call[Batch](ctx, c, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/fork", nil, req)
}

// Resource use as the gateway samples it (package apiproto documents each field).
type (
	// UsagePoint is one sample of a sandbox's resource use; the pointers are nil when
	// the runtime does not report them.
	UsagePoint = apiproto.UsagePoint
	// SandboxMetrics is the gateway's record of a sandbox's resource use: the latest
	// point and a recent history, oldest first.
	SandboxMetrics = apiproto.SandboxUsage
)

// SandboxMetrics returns a sandbox's resource use as the gateway samples it (unlike
// Agent.Metrics, which asks the sandbox's agent).
func (c *Client) SandboxMetrics(ctx context.Context, id string) (*SandboxMetrics, error) {
	return call[SandboxMetrics](ctx, c, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/metrics", nil, nil)
}

// WatchSandboxMetrics streams a sandbox's new usage points as the gateway samples them,
// starting with the current one, until ctx ends, the sandbox is gone (the sequence
// ends without an error) or the connection breaks (it ends with the error).
func (c *Client) WatchSandboxMetrics(ctx context.Context, id string) iter.Seq2[UsagePoint, error] {
	return func(yield func(UsagePoint, error) bool) {
		for e, err := range c.stream(ctx, "/sandboxes/"+url.PathEscape(id)+"/metrics/watch", nil, "metrics stream") {
			if err != nil {
				yield(UsagePoint{}, err)
				return
			}
			var p UsagePoint
			switch e.name {
			case "gone":
				return
			case "usage":
				var u SandboxMetrics
				if err := json.Unmarshal([]byte(e.data), &u); err != nil {
					yield(UsagePoint{}, fmt.Errorf("sandgate: bad metrics event: %w", err))
					return
				}
				if u.Current == nil {
					continue
				}
				p = *u.Current
			case "point":
				if err := json.Unmarshal([]byte(e.data), &p); err != nil {
					yield(UsagePoint{}, fmt.Errorf("sandgate: bad metrics event: %w", err))
					return
				}
			default:
				continue
			}
			if !yield(p, nil) {
				return
			}
		}
	}
}
