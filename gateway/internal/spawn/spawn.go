// Package spawn starts the goroutines of a component that its Stop waits for, once or
// every period: the core's (gateway.Service) and its features' (gateway/pool,
// gateway/state).
package spawn

import (
	"context"
	"sync"
	"time"
)

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

// Every runs fn each period in a goroutine started as Go starts one, until stop closes;
// each run gets a context bounded to 30 s.
func Every(mu *sync.Mutex, stop <-chan struct{}, wg *sync.WaitGroup, every time.Duration, fn func(context.Context)) bool {
	return Go(mu, stop, wg, func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				fn(ctx)
				cancel()
			}
		}
	})
}
