package gateway

import "testing"

func TestWatchHubFansOutAndResyncsWhenBehind(t *testing.T) {
	s := &Service{}
	a, b := s.WatchSandboxes(), s.WatchSandboxes()
	s.watch.notify("sb-1")
	for _, w := range []*Watcher{a, b} {
		if id := <-w.C; id != "sb-1" {
			t.Fatalf("got %q", id)
		}
	}
	// A watcher that does not read falls behind: it is told to list again instead of
	// blocking the others.
	for i := 0; i < watchBuffer+5; i++ {
		s.watch.notify("sb-2")
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
	s.watch.notify("sb-3")
	if len(a.C) != watchBuffer {
		t.Fatalf("a closed watcher still receives (%d queued)", len(a.C))
	}
	if id := <-b.C; id != "sb-3" {
		t.Fatalf("got %q", id)
	}
	s.watch.resyncAll()
	if len(b.Resync) != 1 {
		t.Fatal("resyncAll did not reach the watcher")
	}
}

func TestWatchFilter(t *testing.T) {
	sb := &Sandbox{Status: Status{State: StateRunning}, Metadata: map[string]string{"app": "web", "team": "a"}}
	tests := []struct {
		f    WatchFilter
		want bool
	}{
		{WatchFilter{}, true},
		{WatchFilter{States: []string{"running"}}, true},
		{WatchFilter{States: []string{"Paused", "Running"}}, true},
		{WatchFilter{States: []string{"Paused"}}, false},
		{WatchFilter{Metadata: map[string]string{"app": "web"}}, true},
		{WatchFilter{Metadata: map[string]string{"app": "web", "team": "b"}}, false},
		{WatchFilter{Metadata: map[string]string{"missing": ""}}, false},
		{WatchFilter{States: []string{"Running"}, Metadata: map[string]string{"team": "a"}}, true},
	}
	for _, tt := range tests {
		if got := tt.f.Matches(sb); got != tt.want {
			t.Errorf("%+v.Matches = %v, want %v", tt.f, got, tt.want)
		}
	}
}
