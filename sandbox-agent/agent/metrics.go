package agent

import (
	"encoding/json"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/cgroup"
)

// Metrics is the body of GET /metrics and each line of /metrics/watch.
type Metrics struct {
	CPUCount    float64 `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	MemUsedMiB  float64 `json:"mem_used_mib"`
	Timestamp   int64   `json:"timestamp"`
}

// metricsSampler turns cumulative CPU time into a utilisation percentage, which needs
// two readings: it keeps the previous one.
type metricsSampler struct {
	mu       sync.Mutex
	prev     cgroup.Sample
	prevTime time.Time
}

func newMetricsSampler() *metricsSampler { return &metricsSampler{} }

func (m *metricsSampler) sample() (Metrics, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.prevTime.IsZero() || time.Since(m.prevTime) > 10*time.Second {
		// No recent baseline: take one and measure over a short window.
		s, err := cgroup.Read()
		if err != nil {
			return Metrics{}, err
		}
		m.prev, m.prevTime = s, time.Now()
		time.Sleep(100 * time.Millisecond)
	}
	s, err := cgroup.Read()
	if err != nil {
		return Metrics{}, err
	}
	now := time.Now()
	var pct float64
	if wall := now.Sub(m.prevTime).Nanoseconds(); wall > 0 && s.CPULimit > 0 && s.CPUUsageNanos >= m.prev.CPUUsageNanos {
		pct = float64(s.CPUUsageNanos-m.prev.CPUUsageNanos) / float64(wall) / s.CPULimit * 100
		pct = math.Min(math.Max(pct, 0), 100)
	}
	m.prev, m.prevTime = s, now
	return Metrics{
		CPUCount:    round2(s.CPULimit),
		CPUUsedPct:  round2(pct),
		MemTotalMiB: round2(float64(s.MemLimitBytes) / (1 << 20)),
		MemUsedMiB:  round2(float64(s.MemUsedBytes) / (1 << 20)),
		Timestamp:   now.UnixMilli(),
	}, nil
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	m, err := s.metrics.sample()
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntime, "read metrics: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// handleWatchMetrics streams one JSON line per second until the client leaves.
func (s *Server) handleWatchMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		m, err := s.metrics.sample()
		if err == nil {
			if enc.Encode(m) != nil || rc.Flush() != nil {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}
