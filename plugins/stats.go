package plugins

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Stats describes one loaded plugin and how its calls went since it was
// first loaded (counters survive version replacements).
type Stats struct {
	Info
	Calls
	// P50 and P99 are call durations over the last calls (up to 1024),
	// including the wait for a free instance.
	P50 time.Duration `json:"p50Ns"`
	P99 time.Duration `json:"p99Ns"`
	// LastError and LastErrorAt describe the most recent failure.
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
}

// Calls counts one plugin's calls and events; the gateway's plugin API shows it as it is.
type Calls struct {
	// Invocations counts hook calls, failed ones included.
	Invocations uint64 `json:"invocations"`
	// Errors counts failed calls of any kind (timeouts included).
	Errors uint64 `json:"errors"`
	// Timeouts counts calls cut off by their deadline.
	Timeouts uint64 `json:"timeouts"`
	// Drops counts events lost because the plugin's queue was full or the
	// plugin was removed before they were delivered.
	Drops uint64 `json:"drops"`
	// AuditRejected counts emit_audit records refused (not JSON, too large,
	// too many in one call).
	AuditRejected uint64 `json:"auditRejected"`
	// Queued is the number of events waiting for delivery.
	Queued int `json:"queued"`
	// Instances is the number of live instances of the current version.
	Instances int `json:"instances"`
}

// Info identifies one loaded plugin.
type Info struct {
	Tenant   string    `json:"tenant"`
	Name     string    `json:"name"`
	Version  string    `json:"version"`
	Hash     string    `json:"hash"`
	Hooks    []string  `json:"hooks"`
	LoadedAt time.Time `json:"loadedAt"`
}

const durationRing = 1024

// counters are a plugin's statistics; recording is on every call, so it is
// one short critical section.
type counters struct {
	drops, auditRejected atomic.Uint64

	mu                    sync.Mutex
	invocations, failures uint64
	timeouts              uint64
	ring                  [durationRing]time.Duration
	recorded              int
	lastError             string
	lastErrorAt           time.Time
}

func (c *counters) record(d time.Duration, err error) {
	c.mu.Lock()
	c.invocations++
	c.ring[c.recorded%durationRing] = d
	c.recorded++
	if err != nil {
		c.failures++
		if ErrorCode(err) == CodeTimeout {
			c.timeouts++
		}
		c.lastError = err.Error()
		c.lastErrorAt = time.Now()
	}
	c.mu.Unlock()
}

// fail records a failure outside a hook call (a background instantiation).
func (c *counters) fail(err error) {
	c.mu.Lock()
	c.failures++
	c.lastError = err.Error()
	c.lastErrorAt = time.Now()
	c.mu.Unlock()
}

func (c *counters) snapshot(s *Stats) {
	c.mu.Lock()
	s.Invocations, s.Errors, s.Timeouts = c.invocations, c.failures, c.timeouts
	s.LastError, s.LastErrorAt = c.lastError, c.lastErrorAt
	samples := slices.Clone(c.ring[:min(c.recorded, durationRing)])
	c.mu.Unlock()
	s.Drops, s.AuditRejected = c.drops.Load(), c.auditRejected.Load()
	if len(samples) > 0 {
		slices.Sort(samples)
		s.P50 = samples[(len(samples)-1)*50/100]
		s.P99 = samples[(len(samples)-1)*99/100]
	}
}
