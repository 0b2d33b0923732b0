package spawn

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// waitClosed fails t unless ch closes within a few seconds.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not within 5 s", what)
	}
}

// stopInBackground runs g.Stop in a goroutine and returns a channel closed when it
// returns.
func stopInBackground(g *Group) <-chan struct{} {
	stopped := make(chan struct{})
	go func() {
		g.Stop()
		close(stopped)
	}()
	return stopped
}

func TestGoRunsUntilStoppedAndNothingAfter(t *testing.T) {
	var g Group
	ran := make(chan struct{})
	if !g.Go(func() { close(ran) }) {
		t.Fatal("Go on a fresh group reported false")
	}
	waitClosed(t, ran, "the goroutine Go started ran")
	g.Stop()

	var late atomic.Bool
	if g.Go(func() { late.Store(true) }) {
		t.Fatal("Go after Stop reported true")
	}
	g.Wait()
	time.Sleep(50 * time.Millisecond)
	if late.Load() {
		t.Fatal("Go after Stop ran its function")
	}
}

func TestCloseRefusesGoWithoutWaiting(t *testing.T) {
	var g Group
	release := make(chan struct{})
	g.Go(func() { <-release })
	if !g.Close() {
		t.Fatal("the first Close reported false")
	}
	if g.Close() {
		t.Fatal("a second Close reported true")
	}
	if g.Go(func() {}) {
		t.Fatal("Go after Close reported true")
	}
	close(release)
	g.Wait()
}

func TestStopWaitsForRunningGoroutines(t *testing.T) {
	var g Group
	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	g.Go(func() {
		close(started)
		<-release
		finished.Store(true)
	})
	waitClosed(t, started, "the goroutine started")
	stopped := stopInBackground(&g)
	select {
	case <-stopped:
		t.Fatal("Stop returned while a goroutine of the group ran")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	waitClosed(t, stopped, "Stop returned after the goroutine ended")
	if !finished.Load() {
		t.Fatal("Stop returned before the goroutine finished")
	}
}

func TestStopTellsGoroutinesThroughDoneAndContext(t *testing.T) {
	var g Group
	ctx := g.Context()
	g.Go(func() { <-g.Done() })
	g.Go(func() { <-ctx.Done() })
	if ctx.Err() != nil {
		t.Fatal("the context is cancelled before Stop")
	}
	stopped := stopInBackground(&g)
	waitClosed(t, stopped, "Stop ended goroutines waiting on Done and Context")
	if ctx.Err() != context.Canceled {
		t.Fatalf("context after Stop: %v, want %v", ctx.Err(), context.Canceled)
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
}

func TestStopTwice(t *testing.T) {
	var g Group
	g.Go(func() { <-g.Done() })
	g.Stop()
	waitClosed(t, stopInBackground(&g), "a second Stop returned")
}

func TestStopWithoutGoroutines(t *testing.T) {
	var g Group
	waitClosed(t, stopInBackground(&g), "Stop of a group that started nothing returned")
	if g.Context().Err() == nil {
		t.Fatal("the context of a group stopped before first use is not cancelled")
	}
}

func TestGoAlwaysRunsAfterStopBegan(t *testing.T) {
	var g Group
	release := make(chan struct{})
	handedOff := make(chan struct{})
	g.Go(func() {
		<-release
		g.GoAlways(func() {
			<-g.Done()
			close(handedOff)
		})
	})
	stopped := stopInBackground(&g)
	waitClosed(t, g.Done(), "Done closed")
	close(release)
	waitClosed(t, stopped, "Stop returned")
	select {
	case <-handedOff:
	default:
		t.Fatal("Stop returned before the goroutine GoAlways started after it began")
	}
}

func TestEveryTicksUntilStop(t *testing.T) {
	var g Group
	var runs atomic.Int32
	ticked := make(chan struct{}, 16)
	if !g.Every(10*time.Millisecond, func(ctx context.Context) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a run of Every has no deadline")
		}
		runs.Add(1)
		select {
		case ticked <- struct{}{}:
		default:
		}
	}) {
		t.Fatal("Every on a fresh group reported false")
	}
	for i := range 3 {
		select {
		case <-ticked:
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d of Every: not within 5 s", i+1)
		}
	}
	waitClosed(t, stopInBackground(&g), "Stop ended the loop of Every")
	after := runs.Load()
	time.Sleep(50 * time.Millisecond)
	if n := runs.Load(); n != after {
		t.Fatalf("Every ran %d more times after Stop returned", n-after)
	}
	if g.Every(10*time.Millisecond, func(context.Context) { runs.Add(1) }) {
		t.Fatal("Every after Stop reported true")
	}
}
