package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

func loadTTL(t *testing.T, h *plugins.Host, tenant, example, settings string) {
	t.Helper()
	err := h.Load(context.Background(), plugins.Plugin{
		Tenant: tenant, Name: example, Module: wasm(t, example),
		Config: plugins.Config{Hooks: []string{plugins.HookDecideTTL}, Settings: json.RawMessage(settings)},
	})
	if err != nil {
		t.Fatalf("Load %s: %v", example, err)
	}
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

type ttlCase struct {
	name        string
	in          plugins.TTLInput
	wantExpiry  time.Time
	wantChanged bool
}

func runTTLCases(t *testing.T, h *plugins.Host, tenant string, tests []ttlCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := h.DecideTTL(context.Background(), tenant, tt.in)
			if err != nil {
				t.Fatalf("DecideTTL: %v", err)
			}
			if !got.Equal(tt.wantExpiry) || changed != tt.wantChanged {
				t.Errorf("DecideTTL = %s, changed=%v; want %s, changed=%v", got.UTC().Format(time.RFC3339), changed, tt.wantExpiry.UTC().Format(time.RFC3339), tt.wantChanged)
			}
		})
	}
}

func TestTTLOnActivity(t *testing.T) {
	h := newHost(t, plugins.HostOptions{})
	loadTTL(t, h, "acme", "ttl-on-activity", `{"extendMinutes":15,"maxMinutesAhead":60}`)
	loadTTL(t, h, "ports", "ttl-on-activity", `{"extendMinutes":15,"ports":[8080]}`)
	now := at("2026-01-05T10:00:00Z")
	activity := func(current, max time.Time) plugins.TTLInput {
		return plugins.TTLInput{SandboxID: "sb", Reason: plugins.ReasonActivity, Now: now, CurrentExpiresAt: current, MaxExpiresAt: max,
			Activity: &plugins.Activity{Port: 3000, Method: "GET", Path: "/"}}
	}
	runTTLCases(t, h, "acme", []ttlCase{
		{name: "activity extends by extendMinutes", in: activity(now.Add(2*time.Minute), time.Time{}),
			wantExpiry: now.Add(15 * time.Minute), wantChanged: true},
		{name: "activity never shortens", in: activity(now.Add(30*time.Minute), time.Time{}),
			wantExpiry: now.Add(30 * time.Minute), wantChanged: false},
		{name: "host clamps to maxExpiresAt", in: activity(now.Add(2*time.Minute), now.Add(5*time.Minute)),
			wantExpiry: now.Add(5 * time.Minute), wantChanged: true},
		{name: "already expired sandbox is extended from now", in: activity(now.Add(-time.Minute), time.Time{}),
			wantExpiry: now.Add(15 * time.Minute), wantChanged: true},
		{name: "renew passes the request through", in: plugins.TTLInput{Reason: plugins.ReasonRenew, Now: now,
			CurrentExpiresAt: now.Add(time.Minute), RequestedExpiresAt: now.Add(40 * time.Minute)},
			wantExpiry: now.Add(40 * time.Minute), wantChanged: true},
		{name: "renew capped by maxMinutesAhead", in: plugins.TTLInput{Reason: plugins.ReasonRenew, Now: now,
			CurrentExpiresAt: now.Add(time.Minute), RequestedExpiresAt: now.Add(3 * time.Hour)},
			wantExpiry: now.Add(time.Hour), wantChanged: true},
		{name: "renew without request is no change", in: plugins.TTLInput{Reason: plugins.ReasonRenew, Now: now, CurrentExpiresAt: now.Add(time.Minute)},
			wantExpiry: now.Add(time.Minute), wantChanged: false},
		{name: "renew into the past is clamped to now", in: plugins.TTLInput{Reason: plugins.ReasonRenew, Now: now,
			CurrentExpiresAt: now.Add(time.Minute), RequestedExpiresAt: now.Add(-time.Hour)},
			wantExpiry: now, wantChanged: true},
	})
	runTTLCases(t, h, "ports", []ttlCase{
		{name: "activity on another port is ignored", in: activity(now.Add(time.Minute), time.Time{}),
			wantExpiry: now.Add(time.Minute), wantChanged: false},
		{name: "activity on a listed port extends", in: plugins.TTLInput{Reason: plugins.ReasonActivity, Now: now, CurrentExpiresAt: now.Add(time.Minute),
			Activity: &plugins.Activity{Port: 8080, Method: "POST", Path: "/api"}},
			wantExpiry: now.Add(15 * time.Minute), wantChanged: true},
	})
}

func TestTTLBusinessHours(t *testing.T) {
	h := newHost(t, plugins.HostOptions{})
	// Business hours are 08:00-20:00 at UTC+2, Monday to Friday: 06:00Z-18:00Z.
	loadTTL(t, h, "acme", "ttl-business-hours", `{"utcOffsetMinutes":120,"open":"08:00","close":"20:00","extendMinutes":60,"offHoursExtendMinutes":10}`)
	activity := func(now string) plugins.TTLInput {
		n := at(now)
		return plugins.TTLInput{Reason: plugins.ReasonActivity, Now: n, CurrentExpiresAt: n.Add(time.Minute)}
	}
	renew := func(now, requested string) plugins.TTLInput {
		n := at(now)
		return plugins.TTLInput{Reason: plugins.ReasonRenew, Now: n, CurrentExpiresAt: n.Add(time.Minute), RequestedExpiresAt: at(requested)}
	}
	runTTLCases(t, h, "acme", []ttlCase{
		{name: "monday 10:00 local extends an hour", in: activity("2026-01-05T08:00:00Z"),
			wantExpiry: at("2026-01-05T09:00:00Z"), wantChanged: true},
		{name: "opening minute counts as business hours", in: activity("2026-01-05T06:00:00Z"),
			wantExpiry: at("2026-01-05T07:00:00Z"), wantChanged: true},
		{name: "one minute before opening is off hours", in: activity("2026-01-05T05:59:00Z"),
			wantExpiry: at("2026-01-05T06:09:00Z"), wantChanged: true},
		{name: "19:30 local stops at closing time", in: activity("2026-01-05T17:30:00Z"),
			wantExpiry: at("2026-01-05T18:00:00Z"), wantChanged: true},
		{name: "closing time itself is off hours", in: activity("2026-01-05T18:00:00Z"),
			wantExpiry: at("2026-01-05T18:10:00Z"), wantChanged: true},
		{name: "saturday is off hours", in: activity("2026-01-10T10:00:00Z"),
			wantExpiry: at("2026-01-10T10:10:00Z"), wantChanged: true},
		{name: "friday 22:30Z is saturday locally", in: activity("2026-01-09T22:30:00Z"),
			wantExpiry: at("2026-01-09T22:40:00Z"), wantChanged: true},
		{name: "sunday 23:00Z is monday 01:00 locally, off hours", in: activity("2026-01-11T23:00:00Z"),
			wantExpiry: at("2026-01-11T23:10:00Z"), wantChanged: true},
		{name: "activity never shortens a later expiry", in: plugins.TTLInput{Reason: plugins.ReasonActivity, Now: at("2026-01-05T08:00:00Z"),
			CurrentExpiresAt: at("2026-01-05T12:00:00Z")},
			wantExpiry: at("2026-01-05T12:00:00Z"), wantChanged: false},
		{name: "renew in business hours capped at closing", in: renew("2026-01-05T08:00:00Z", "2026-01-06T08:00:00Z"),
			wantExpiry: at("2026-01-05T18:00:00Z"), wantChanged: true},
		{name: "renew in business hours within the day is kept", in: renew("2026-01-05T08:00:00Z", "2026-01-05T15:00:00Z"),
			wantExpiry: at("2026-01-05T15:00:00Z"), wantChanged: true},
		{name: "renew off hours gets only the short extension", in: renew("2026-01-10T10:00:00Z", "2026-01-10T14:00:00Z"),
			wantExpiry: at("2026-01-10T10:10:00Z"), wantChanged: true},
		{name: "host cap below the rule wins", in: plugins.TTLInput{Reason: plugins.ReasonActivity, Now: at("2026-01-05T08:00:00Z"),
			CurrentExpiresAt: at("2026-01-05T08:01:00Z"), MaxExpiresAt: at("2026-01-05T08:30:00Z")},
			wantExpiry: at("2026-01-05T08:30:00Z"), wantChanged: true},
	})
}

func TestDecideTTLRouting(t *testing.T) {
	h := newHost(t, plugins.HostOptions{})
	ctx := context.Background()
	loadTTL(t, h, "acme", "ttl-on-activity", `{}`)

	t.Run("a second decide_ttl plugin in a tenant conflicts", func(t *testing.T) {
		err := h.Load(ctx, plugins.Plugin{Tenant: "acme", Name: "other", Module: wasm(t, "noop"),
			Config: plugins.Config{Hooks: []string{plugins.HookDecideTTL}}})
		if plugins.ErrorCode(err) != plugins.CodeHookConflict {
			t.Fatalf("Load: %v, want %s", err, plugins.CodeHookConflict)
		}
		if got := h.List("acme"); len(got) != 1 {
			t.Errorf("List after refused Load: %+v", got)
		}
	})
	t.Run("another tenant may have its own", func(t *testing.T) {
		loadTTL(t, h, "globex", "ttl-business-hours", `{}`)
	})
	t.Run("an on_event plugin does not conflict", func(t *testing.T) {
		loadAudit(t, h, "acme", `{}`)
	})
	t.Run("tenant without a plugin gets ErrNotFound", func(t *testing.T) {
		_, _, err := h.DecideTTL(ctx, "initech", plugins.TTLInput{Reason: plugins.ReasonActivity})
		if !errors.Is(err, plugins.ErrNotFound) {
			t.Fatalf("DecideTTL: %v, want ErrNotFound", err)
		}
	})
	t.Run("list", func(t *testing.T) {
		var names []string
		for _, info := range h.List("acme") {
			names = append(names, info.Name+":"+info.Hooks[0])
		}
		if want := "audit:on_event ttl-on-activity:decide_ttl"; strings.Join(names, " ") != want {
			t.Errorf("List = %s, want %s", strings.Join(names, " "), want)
		}
	})
	t.Run("remove", func(t *testing.T) {
		if err := h.Remove("acme", "ttl-on-activity"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.DecideTTL(ctx, "acme", plugins.TTLInput{Reason: plugins.ReasonActivity}); !errors.Is(err, plugins.ErrNotFound) {
			t.Errorf("DecideTTL after Remove: %v, want ErrNotFound", err)
		}
		if _, err := h.Stats("acme", "ttl-on-activity"); !errors.Is(err, plugins.ErrNotFound) {
			t.Errorf("Stats after Remove: %v, want ErrNotFound", err)
		}
		if err := h.Remove("acme", "ttl-on-activity"); !errors.Is(err, plugins.ErrNotFound) {
			t.Errorf("second Remove: %v, want ErrNotFound", err)
		}
		// With the old one gone, another decide_ttl plugin may come in.
		loadTTL(t, h, "acme", "noop", `{}`)
	})
	t.Run("invalid identity", func(t *testing.T) {
		for _, p := range []plugins.Plugin{{Tenant: "", Name: "x"}, {Tenant: "acme", Name: "../x"}, {Tenant: "acme", Name: ""}} {
			p.Module, p.Config = wasm(t, "noop"), plugins.Config{Hooks: []string{plugins.HookOnEvent}}
			if err := h.Load(ctx, p); plugins.ErrorCode(err) != plugins.CodeInvalidConfig {
				t.Errorf("Load(%q, %q): %v, want %s", p.Tenant, p.Name, err, plugins.CodeInvalidConfig)
			}
		}
	})
}

// TestConcurrentDecideTTL runs more callers than instances.
func TestConcurrentDecideTTL(t *testing.T) {
	h := newHost(t, plugins.HostOptions{PoolSize: 2})
	loadTTL(t, h, "acme", "ttl-on-activity", `{"extendMinutes":5}`)
	now := at("2026-01-05T10:00:00Z")
	errs := make(chan error, 8*50)
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 50 {
				got, _, err := h.DecideTTL(context.Background(), "acme", plugins.TTLInput{Reason: plugins.ReasonActivity, Now: now, CurrentExpiresAt: now})
				if err == nil && !got.Equal(now.Add(5*time.Minute)) {
					err = fmt.Errorf("got %s", got)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st, _ := h.Stats("acme", "ttl-on-activity"); st.Invocations != 400 || st.P50 <= 0 || st.P99 < st.P50 {
		t.Errorf("stats: %+v", st)
	}
}

// TestIdleInstancesClosed checks that HostOptions.IdleTimeout gives idle
// instances back and that the next call starts a new one.
func TestIdleInstancesClosed(t *testing.T) {
	h := newHost(t, plugins.HostOptions{IdleTimeout: 100 * time.Millisecond})
	loadTTL(t, h, "acme", "ttl-on-activity", `{}`)
	instances := func() int {
		st, err := h.Stats("acme", "ttl-on-activity")
		if err != nil {
			t.Fatal(err)
		}
		return st.Instances
	}
	if n := instances(); n != 1 {
		t.Fatalf("%d instances after Load, want 1", n)
	}
	for deadline := time.Now().Add(5 * time.Second); instances() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("idle instance still alive after 5s")
		}
	}
	now := at("2026-01-05T10:00:00Z")
	if _, changed, err := h.DecideTTL(context.Background(), "acme", plugins.TTLInput{Reason: plugins.ReasonActivity, Now: now, CurrentExpiresAt: now}); err != nil || !changed {
		t.Fatalf("DecideTTL after trim: changed=%v err=%v", changed, err)
	}
	if n := instances(); n != 1 {
		t.Errorf("%d instances after a call, want 1", n)
	}
}
