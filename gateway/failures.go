package gateway

import (
	"maps"
	"sync"
)

// Background work (the reaper, the reconciler) has no caller to hand an error to, so
// every error it meets goes through backgroundError: counted by job, so that a test or
// an operator sees it (BackgroundErrors), and logged. While the store is known to be
// unreachable the log line is Debug: the store logs the outage itself, once, and a
// warning from every tick of every loop would bury it.

// failureCounts counts background errors by job.
type failureCounts struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (f *failureCounts) add(job string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]uint64{}
	}
	f.n[job]++
}

// BackgroundErrors returns how many errors each background job ("reaper",
// "reconciler") has met since the service was built.
func (s *Service) BackgroundErrors() map[string]uint64 {
	s.failures.mu.Lock()
	defer s.failures.mu.Unlock()
	return maps.Clone(s.failures.n)
}

// backgroundError counts err against job and logs what failed, with args (never a
// secret) as context.
func (s *Service) backgroundError(job, what string, err error, args ...any) {
	s.failures.add(job)
	log := s.log.Warn
	if s.store.Unreachable() {
		log = s.log.Debug
	}
	log(job+": "+what, append(args, "err", err)...)
}
