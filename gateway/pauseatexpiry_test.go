package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// TestPauseAtExpiry: a sandbox with extensions["expiry.pause"] = "true" is paused at
// its expiry, not removed, and kept paused for at most MaxTimeout; a resume and a
// renewal give it a lifetime again; when its keep passes while it is still paused it is
// removed. A sandbox without the extension is removed at its expiry as always.
func TestPauseAtExpiry(t *testing.T) {
	const keep = 5 * time.Second
	c := newTestCore(t, Config{ReapInterval: 20 * time.Millisecond, MinTimeout: time.Second, MaxTimeout: keep})
	ctx := context.Background()
	create := func(pause bool) string {
		t.Helper()
		req := sleeper(1)
		if pause {
			req.Extensions = map[string]string{ExtensionPauseAtExpiry: "true"}
		}
		resp, err := c.svc.Create(ctx, admin, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ID
	}
	paused, removed := create(true), create(false)
	state := func(id string) (*store.Sandbox, error) { return c.store.GetSandbox(ctx, id) }
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(keep + 10*time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen", what)
			}
		}
	}
	waitFor("the pause at expiry", func() bool { sb, err := state(paused); return err == nil && sb.State == StatePaused })
	waitFor("the removal at expiry", func() bool { _, err := state(removed); return errors.Is(err, store.ErrNotFound) })
	sb, err := state(paused)
	if err != nil {
		t.Fatalf("the paused sandbox: %v", err)
	}
	// Kept for the longest lifetime from its pause (its last transition).
	if sb.ExpiresAt == nil || sb.ExpiresAt.Sub(sb.LastTransitionAt) < keep-time.Second || sb.ExpiresAt.Sub(sb.LastTransitionAt) > keep+time.Second {
		t.Fatalf("the sandbox paused at %v is kept until %v, want about %s later", sb.LastTransitionAt, sb.ExpiresAt, keep)
	}

	if err := c.svc.Resume(ctx, admin, paused); err != nil {
		t.Fatal(err)
	}
	if _, err := c.svc.Renew(ctx, admin, paused, time.Now().Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Its new lifetime ends in a pause again, and its keep in the removal.
	waitFor("the second pause", func() bool { sb, err := state(paused); return err == nil && sb.State == StatePaused })
	waitFor("the removal once kept", func() bool { _, err := state(paused); return errors.Is(err, store.ErrNotFound) })
}

// TestPauseAtExpiryValue: the extension is "true" or "false".
func TestPauseAtExpiryValue(t *testing.T) {
	c := newTestCore(t, Config{})
	req := sleeper(600)
	req.Extensions = map[string]string{ExtensionPauseAtExpiry: "yes"}
	_, err := c.svc.Create(context.Background(), admin, req)
	wantCode(t, err, KindInvalid, CodeInvalidParameter)
}
