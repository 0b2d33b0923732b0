package plugins_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

// loadMisbehave loads the deliberately bad plugin for tenant "t" with the
// given limits and returns the host.
func loadMisbehave(t *testing.T, opts plugins.HostOptions, limits plugins.Limits) *plugins.Host {
	t.Helper()
	h := newHost(t, opts)
	err := h.Load(context.Background(), plugins.Plugin{
		Tenant: "t", Name: "bad", Version: "1", Module: wasm(t, "bad-misbehave"),
		Config: plugins.Config{Hooks: []string{plugins.HookOnEvent, plugins.HookDecideTTL}, Limits: limits},
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return h
}

func decide(h *plugins.Host, sandboxID string) (time.Time, bool, error) {
	now := time.Now()
	return h.DecideTTL(context.Background(), "t", plugins.TTLInput{
		SandboxID: sandboxID, Reason: plugins.ReasonActivity, Now: now, CurrentExpiresAt: now.Add(time.Minute),
	})
}

// TestMisbehavingPlugin checks each failure mode of a decide_ttl call: the
// caller gets an error with the right code in bounded time, the failure is
// counted, and the next call succeeds on a healthy instance.
func TestMisbehavingPlugin(t *testing.T) {
	tests := []struct {
		name      string
		sandboxID string
		limits    plugins.Limits
		wantCode  string
		wantMsg   string
		within    time.Duration
		isTimeout bool
	}{
		{name: "infinite loop is cut off at the deadline", sandboxID: "loop", limits: plugins.Limits{TimeoutMs: 50},
			wantCode: plugins.CodeTimeout, wantMsg: "deadline exceeded", within: time.Second, isTimeout: true},
		{name: "memory bomb hits the limit", sandboxID: "oom", limits: plugins.Limits{MemoryMiB: 48, TimeoutMs: 5000},
			wantCode: plugins.CodeMemoryLimit, wantMsg: "48 MiB", within: 5 * time.Second},
		{name: "panic traps", sandboxID: "trap", limits: plugins.Limits{TimeoutMs: 2000},
			wantCode: plugins.CodeTrap, wantMsg: "trap requested", within: time.Second},
		{name: "malformed JSON result", sandboxID: "badjson", limits: plugins.Limits{TimeoutMs: 2000},
			wantCode: plugins.CodeBadOutput, wantMsg: "not JSON", within: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := loadMisbehave(t, plugins.HostOptions{}, tt.limits)
			start := time.Now()
			_, _, err := decide(h, tt.sandboxID)
			elapsed := time.Since(start)
			if got := plugins.ErrorCode(err); got != tt.wantCode {
				t.Fatalf("DecideTTL(%s): code %q, want %q (err: %v)", tt.sandboxID, got, tt.wantCode, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("DecideTTL(%s): error %q does not mention %q", tt.sandboxID, err, tt.wantMsg)
			}
			if elapsed > tt.within {
				t.Errorf("DecideTTL(%s) took %v, want under %v", tt.sandboxID, elapsed, tt.within)
			}

			// The next calls work: a fresh instance replaced the broken one
			// (or, for a bad result, the instance was fine all along).
			for i := range 3 {
				if _, changed, err := decide(h, "fine"); err != nil || changed {
					t.Fatalf("call %d after failure: changed=%v err=%v", i, changed, err)
				}
			}
			st, err := h.Stats("t", "bad")
			if err != nil {
				t.Fatal(err)
			}
			if st.Errors != 1 || st.Invocations != 4 {
				t.Errorf("stats: %d errors in %d invocations, want 1 in 4", st.Errors, st.Invocations)
			}
			if wantTimeouts := map[bool]uint64{true: 1}[tt.isTimeout]; st.Timeouts != wantTimeouts {
				t.Errorf("stats: %d timeouts, want %d", st.Timeouts, wantTimeouts)
			}
			if !strings.Contains(st.LastError, tt.wantCode) {
				t.Errorf("stats: last error %q, want one with %s", st.LastError, tt.wantCode)
			}
		})
	}
}

// TestMisbehavingOnEvent checks that failures in the asynchronous on_event
// path are counted and do not stop later events.
func TestMisbehavingOnEvent(t *testing.T) {
	audits := make(chan string, 16)
	h := loadMisbehave(t, plugins.HostOptions{Audit: func(tenant string, record []byte) { audits <- tenant + " " + string(record) }},
		plugins.Limits{TimeoutMs: 1000})
	for _, id := range []string{"loop", "trap", "fine"} {
		h.OnEvent("t", []byte(`{"id":"e-`+id+`","type":"command.started","tenant":"t","sandboxId":"`+id+`","time":"2026-01-05T10:00:00Z","data":{}}`))
	}
	select {
	case got := <-audits:
		if want := `t {"plugin":"bad-misbehave","ok":true}`; got != want {
			t.Errorf("audit record %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event after two failing ones was not delivered")
	}
	st, _ := h.Stats("t", "bad")
	if st.Invocations != 3 || st.Errors != 2 || st.Timeouts != 1 {
		t.Errorf("stats: %d invocations, %d errors, %d timeouts; want 3, 2, 1", st.Invocations, st.Errors, st.Timeouts)
	}
}

// TestCallerContext checks that the caller's own deadline bounds a call too.
func TestCallerContext(t *testing.T) {
	h := loadMisbehave(t, plugins.HostOptions{}, plugins.Limits{TimeoutMs: 5000})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := h.DecideTTL(ctx, "t", plugins.TTLInput{SandboxID: "loop", Reason: plugins.ReasonActivity})
	if plugins.ErrorCode(err) != plugins.CodeTimeout {
		t.Fatalf("DecideTTL: %v, want a timeout", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("DecideTTL took %v despite a 30ms caller deadline", elapsed)
	}
}
