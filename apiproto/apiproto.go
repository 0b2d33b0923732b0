// Package apiproto declares JSON shapes of the gateway's /v1 API that the gateway
// answers and the Go SDK reads alike: states, pages, snapshots, batches and resource
// use. It is a leaf: it imports nothing of sandgate, so that the server and the SDK
// agree on these shapes by construction instead of by copy (the SDK still imports
// nothing of the gateway). Shapes that differ between the two, such as a create
// request (the SDK's has helpers and optional pointers), stay each side's own.
package apiproto

import "time"

// Status is where a sandbox (or a snapshot, or a batch member) is in its life, with
// its explanation.
type Status struct {
	State            string     `json:"state"`
	Reason           string     `json:"reason,omitempty"`
	Message          string     `json:"message,omitempty"`
	LastTransitionAt *time.Time `json:"lastTransitionAt,omitempty"`
}

// Pagination describes one page of a list.
type Pagination struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// Snapshot is a kept copy of a sandbox's filesystem, from which new sandboxes start
// and which forks are made of.
type Snapshot struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandboxId"`
	Name      string    `json:"name,omitempty"`
	Status    Status    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
}

// SnapshotPage is one page of GET /v1/snapshots.
type SnapshotPage struct {
	Items      []Snapshot `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// BatchRequest is the body of POST /v1/batches: Count sandboxes of a template, or
// claimed from a pool (PoolRef), with the claim's own timeout, env, metadata and
// entrypoint. Template is the create request of whichever side holds it (the gateway's
// and the SDK's differ, see the package comment).
type BatchRequest[Template any] struct {
	Count      int               `json:"count"`
	PoolRef    string            `json:"poolRef,omitempty"`
	Template   *Template         `json:"template,omitempty"`
	Timeout    *int64            `json:"timeout,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
}

// Batch is a group of sandboxes created together (POST /v1/batches, or a fork).
type Batch struct {
	ID        string        `json:"id"`
	Count     int           `json:"count"`
	PoolRef   string        `json:"poolRef,omitempty"`
	Members   []BatchMember `json:"members"`
	Summary   BatchSummary  `json:"summary"`
	CreatedAt time.Time     `json:"createdAt"`
}

// Done reports whether no member is still pending.
func (b *Batch) Done() bool {
	return b.Summary.Pending == 0 && b.Summary.Running+b.Summary.Failed+b.Summary.Gone >= b.Count
}

// BatchMember is one sandbox of a batch with its current state; Error says why a
// member that failed to start failed.
type BatchMember struct {
	ID     string  `json:"id"`
	Source string  `json:"source,omitempty"` // "pool" or "cold"
	Status Status  `json:"status"`
	Error  *Status `json:"error,omitempty"`
	// AgentEndpoint is how to reach the member's agent (port 44772), exactly as
	// GET /v1/sandboxes/{id}/endpoints/44772 answers it for the key that read the
	// batch: set for a Running member when that key may reach the sandbox's ports
	// (Rego action sandbox.proxy), so that a client of a batch of N need not make N
	// endpoint calls before its first commands.
	AgentEndpoint *Endpoint `json:"agentEndpoint,omitempty"`
}

// Endpoint is how to reach one port of a sandbox through the gateway: prepend the
// scheme to Endpoint and send Headers with every request. URL is a signed browser link
// (only when one was asked for, until ExpiresAt).
type Endpoint struct {
	Endpoint  string            `json:"endpoint"`
	Headers   map[string]string `json:"headers,omitempty"`
	URL       string            `json:"url,omitempty"`
	ExpiresAt *time.Time        `json:"expiresAt,omitempty"`
}

// BatchSummary counts a batch's members by outcome.
type BatchSummary struct {
	Running int `json:"running"`
	Pending int `json:"pending"`
	Failed  int `json:"failed"`
	Gone    int `json:"gone"`
}

// UsagePoint is one point of a sandbox's resource history. Fields the source cannot
// tell are null.
type UsagePoint struct {
	Time time.Time `json:"time"`
	// CPUCores is the CPUs used on average since the previous point; CPUPercent the same
	// as a share of CPULimitCores (of one CPU when the sandbox has no limit).
	CPUCores      float64  `json:"cpuCores"`
	CPULimitCores *float64 `json:"cpuLimitCores"`
	CPUPercent    float64  `json:"cpuPercent"`
	// MemoryBytes is the memory in use (page cache excluded), MemoryPeakBytes the most
	// seen (by the engine, else over the kept history), MemoryLimitBytes the limit.
	MemoryBytes      uint64  `json:"memoryBytes"`
	MemoryPeakBytes  uint64  `json:"memoryPeakBytes"`
	MemoryLimitBytes uint64  `json:"memoryLimitBytes"`
	Pids             *uint64 `json:"pids"`
	NetRxBytes       *uint64 `json:"netRxBytes"`
	NetTxBytes       *uint64 `json:"netTxBytes"`
	// DiskBytes is the size of the writable layer, read once a minute.
	DiskBytes *int64 `json:"diskBytes"`
	// EgressDeniedQueries counts the DNS questions the sandbox's egress enforcer refused
	// since it started (null without an enforcer).
	EgressDeniedQueries *uint64 `json:"egressDeniedQueries"`
}

// SandboxUsage is the gateway's record of a sandbox's resource use (GET
// /v1/sandboxes/{id}/metrics): the latest point and a recent history, oldest first.
type SandboxUsage struct {
	ID string `json:"id"`
	// Source is "engine" (the container engine's stats) or "agent" (the agent's cgroup).
	Source          string       `json:"source,omitempty"`
	IntervalSeconds float64      `json:"intervalSeconds"`
	Current         *UsagePoint  `json:"current"`
	History         []UsagePoint `json:"history"`
}
