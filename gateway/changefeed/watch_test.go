package changefeed

import (
	"testing"

	"github.com/sandgate/sandgate/gateway/store"
)

func TestWatchHubFansOutAndResyncsWhenBehind(t *testing.T) {
	m := &Manager{}
	a, b := m.Watch(), m.Watch()
	m.watch.notify("sb-1")
	for _, w := range []*Watcher{a, b} {
		if id := <-w.C; id != "sb-1" {
			t.Fatalf("got %q", id)
		}
	}
	// A watcher that does not read falls behind: it is told to list again instead of
	// blocking the others.
	for i := 0; i < watchBuffer+5; i++ {
		m.watch.notify("sb-2")
		<-b.C
	}
	select {
	case <-a.Resync:
	default:
		t.Fatal("the lagging watcher was not told to resync")
	}
	select {
	case <-b.Resync:
		t.Fatal("the reading watcher was told to resync")
	default:
	}
	a.Close()
	m.watch.notify("sb-3")
	if len(a.C) != watchBuffer {
		t.Fatalf("a closed watcher still receives (%d queued)", len(a.C))
	}
	if id := <-b.C; id != "sb-3" {
		t.Fatalf("got %q", id)
	}
	m.watch.resyncAll()
	if len(b.Resync) != 1 {
		t.Fatal("resyncAll did not reach the watcher")
	}
}

func TestFilter(t *testing.T) {
	sb := &store.Sandbox{State: stateRunning, Metadata: map[string]string{"app": "web", "team": "a"}}
	tests := []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{States: []string{"running"}}, true},
		{Filter{States: []string{"Paused", "Running"}}, true},
		{Filter{States: []string{"Paused"}}, false},
		{Filter{Metadata: map[string]string{"app": "web"}}, true},
		{Filter{Metadata: map[string]string{"app": "web", "team": "b"}}, false},
		{Filter{Metadata: map[string]string{"missing": ""}}, false},
		{Filter{States: []string{"Running"}, Metadata: map[string]string{"team": "a"}}, true},
	}
	for _, tt := range tests {
		if got := tt.f.Matches(sb); got != tt.want {
			t.Errorf("%+v.Matches = %v, want %v", tt.f, got, tt.want)
		}
	}
}
