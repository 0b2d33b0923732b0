package eventlog

import (
	"strconv"
	"testing"

	"github.com/sandgate/sandgate/gateway/store"
)

func TestQueryMatches(t *testing.T) {
	created := store.Event{Type: "sandbox.created", SandboxID: "s1"}
	decision := store.Event{Type: "policy.decision"}
	tests := []struct {
		q    Query
		ev   store.Event
		want bool
	}{
		{Query{}, decision, true},
		{Query{Sandbox: "s1"}, created, true},
		{Query{Sandbox: "s2"}, created, false},
		{Query{Sandbox: "s1"}, decision, false},
		{Query{Types: []string{"sandbox."}}, created, true},
		{Query{Types: []string{"command.", "sandbox.created"}}, created, true},
		{Query{Types: []string{"sandbox.deleted"}}, created, false},
		{Query{Exclude: []string{"policy."}}, decision, false},
		{Query{Exclude: []string{"policy."}}, created, true},
		{Query{Types: []string{"sandbox."}, Exclude: []string{"sandbox.created"}}, created, false},
	}
	for _, tt := range tests {
		if got := tt.q.Matches(tt.ev); got != tt.want {
			t.Errorf("%+v.Matches(%s) = %v, want %v", tt.q, tt.ev.Type, got, tt.want)
		}
	}
}

// TestEventQueue: events come out in the order they went in, the writer is woken once
// a batch is waiting (not per event), and past eventQueueMax new events are refused.
func TestEventQueue(t *testing.T) {
	q := eventQueue{wake: make(chan struct{}, 1)}
	for i := 0; i < eventBatch-1; i++ {
		if !q.push(store.Event{ID: strconv.Itoa(i)}) {
			t.Fatalf("push %d refused", i)
		}
	}
	select {
	case <-q.wake:
		t.Fatal("woken before a batch was waiting")
	default:
	}
	q.push(store.Event{ID: strconv.Itoa(eventBatch - 1)})
	select {
	case <-q.wake:
	default:
		t.Fatal("not woken with a batch waiting")
	}
	got := q.take(nil)
	if len(got) != eventBatch {
		t.Fatalf("took %d events, want %d", len(got), eventBatch)
	}
	for i, ev := range got {
		if ev.ID != strconv.Itoa(i) {
			t.Fatalf("event %d is %s: out of order", i, ev.ID)
		}
	}
	if rest := q.take(nil); len(rest) != 0 {
		t.Fatalf("%d events left after take", len(rest))
	}
	for i := 0; i < eventQueueMax; i++ {
		if !q.push(store.Event{}) {
			t.Fatalf("push %d refused below the bound", i)
		}
	}
	if q.push(store.Event{}) {
		t.Fatal("push accepted past eventQueueMax")
	}
	if n := len(q.take(nil)); n != eventQueueMax {
		t.Fatalf("took %d, want %d", n, eventQueueMax)
	}
	if !q.push(store.Event{}) {
		t.Fatal("push refused after the queue was emptied")
	}
}
