// Package spawn starts the goroutines of a component that its Stop waits for: the
// core's (gateway.Service) and its features' (gateway/pool).
package spawn

import "sync"

// Go runs fn in a goroutine counted in wg, unless stop is closed: then it runs nothing
// and reports false. mu is the lock the component's Stop holds while it closes stop, so
// that no goroutine is added to wg once Stop has begun waiting for it.
func Go(mu *sync.Mutex, stop <-chan struct{}, wg *sync.WaitGroup, fn func()) bool {
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-stop:
		return false
	default:
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		fn()
	}()
	return true
}
