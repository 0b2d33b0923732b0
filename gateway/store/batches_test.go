package store

import (
	"context"
	"testing"
	"time"
)

func TestBatchWork(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	b := &Batch{ID: "b1", Tenant: "t", Count: 3, Members: []string{"m1", "m2", "m3"}, CreatedAt: time.Now()}
	if err := s.PutBatchWork(ctx, b, []byte(`{"w":1}`), "g1", []string{"m1", "m2", "m3"}); err != nil {
		t.Fatal(err)
	}
	if open, _ := s.OpenBatches(ctx); len(open) != 1 || open[0] != "b1" {
		t.Fatalf("open batches = %v", open)
	}
	if w, err := s.BatchWork(ctx, "b1"); err != nil || string(w) != `{"w":1}` {
		t.Fatalf("work = %s, %v", w, err)
	}
	// Only the owner settles a member; a takeover moves it and counts.
	if ok, _ := s.FinishMember(ctx, "b1", "m1", "g2"); ok {
		t.Fatal("g2 finished g1's member")
	}
	if ok, _ := s.FinishMember(ctx, "b1", "m1", "g1"); !ok {
		t.Fatal("g1 could not finish its member")
	}
	if n, _ := s.TakeMember(ctx, "b1", "m2", "g1", "g2"); n != 1 {
		t.Fatalf("first takeover counted %d", n)
	}
	if n, _ := s.TakeMember(ctx, "b1", "m2", "g1", "g3"); n != 0 {
		t.Fatal("a second gateway took over a member already taken")
	}
	if ok, _ := s.FailMember(ctx, "b1", "m2", "g1", MemberError{Code: "X", Message: "x"}); ok {
		t.Fatal("the old owner failed a member taken from it")
	}
	if ok, _ := s.FailMember(ctx, "b1", "m2", "g2", MemberError{Code: "X", Message: "x"}); !ok {
		t.Fatal("the new owner could not fail its member")
	}
	got, errs, err := s.GetBatch(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Queued) != 1 || got.Queued["m3"] != "g1" {
		t.Fatalf("queued = %v, want m3 by g1", got.Queued)
	}
	if errs["m2"].Code != "X" {
		t.Fatalf("errors = %v", errs)
	}
	if err := s.DeleteBatch(ctx, got); err != nil {
		t.Fatal(err)
	}
	if open, _ := s.OpenBatches(ctx); len(open) != 0 {
		t.Fatalf("deleted batch still open: %v", open)
	}
}
