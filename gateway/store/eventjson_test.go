package store

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestEncodeEventMatchesJSON: encodeEvent writes what json.Marshal writes, for the
// events of the hot paths and for values it hands over to json.Marshal.
func TestEncodeEventMatchesJSON(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 59, 58, 123456789, time.UTC)
	tests := []struct {
		name string
		ev   Event
	}{
		{"preview.accessed", Event{Type: "preview.accessed", Tenant: "default", SandboxID: "0b5c8f0e-1f1d-4c55-9f0a-1c2d3e4f5a6b", Time: at, Data: map[string]any{
			"port": 8000, "method": "GET", "path": "/headers", "status": 200, "bytes": int64(512), "durationMs": 1.234, "credential": "accessToken"}}},
		{"no data", Event{Type: "sandbox.deleted", Tenant: "t", Time: at}},
		{"empty data", Event{Type: "x", Tenant: "t", Time: at, Data: map[string]any{}}},
		{"with id", Event{ID: "1700000000000-0", Type: "x", Tenant: "t", Time: at}},
		{"zero time", Event{Type: "x", Tenant: "t"}},
		{"local time", Event{Type: "x", Tenant: "t", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 5*3600+1800))}},
		{"time past 9999", Event{Type: "x", Tenant: "t", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"bools, nil, small and huge floats", Event{Type: "x", Tenant: "t", Time: at, Data: map[string]any{
			"a": true, "b": false, "c": nil, "d": 0.0, "e": 1e-7, "f": 1e21, "g": -3.5e-9, "h": 123456789.125, "i": int32(-7), "j": uint32(7)}}},
		{"strings to escape", Event{Type: "command.started", Tenant: "t", Time: at, Data: map[string]any{
			"command": "echo \"<a & b>\"\n\tdone \u2028 é \xff", "path": "/a?b=<c>"}}},
		{"escaped key", Event{Type: "x", Tenant: "t", Time: at, Data: map[string]any{"a\"b": 1}}},
		{"nested and other types", Event{Type: "x", Tenant: "t", Time: at, Data: map[string]any{
			"list": []string{"a"}, "map": map[string]any{"k": 1}, "u8": uint8(3), "f32": float32(1.5), "t": at}}},
		{"escaped tenant", Event{Type: "x", Tenant: "<t>", Time: at}},
		{"typed access", Event{Type: "preview.accessed", Tenant: "default", SandboxID: "0b5c8f0e-1f1d-4c55-9f0a-1c2d3e4f5a6b", Time: at, Access: &AccessData{
			Port: 8000, Method: "GET", Path: "/headers", Status: 200, Bytes: 512, DurationMs: 1.234, Credential: "sandbox_token"}}},
		{"typed access, zero", Event{Type: "preview.accessed", Tenant: "t", Time: at, Access: &AccessData{}}},
		{"typed access, path to escape", Event{Type: "preview.accessed", Tenant: "t", Time: at, Access: &AccessData{
			Port: 1, Method: "GET", Path: "/a?b=<c>&d=\"e\"", Status: 404, Bytes: -1, DurationMs: 1e-7, Credential: "cookie"}}},
		{"typed access wins over data", Event{Type: "preview.accessed", Tenant: "t", Time: at, Data: map[string]any{"x": 1}, Access: &AccessData{Method: "HEAD"}}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		tests = append(tests, struct {
			name string
			ev   Event
		}{"random float", Event{Type: "x", Tenant: "t", Time: at, Data: map[string]any{"durationMs": f, "n": rng.Int64() - rng.Int64()}}})
		tests = append(tests, struct {
			name string
			ev   Event
		}{"random typed access", Event{Type: "preview.accessed", Tenant: "t", Time: at, Access: &AccessData{
			Port: int(rng.Int32()), Status: int(rng.Int32()) - int(rng.Int32()), Bytes: rng.Int64(), DurationMs: f, Method: "GET", Path: "/"}}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := json.Marshal(tt.ev.withData()) // Access, if set, as Data
			if tt.ev.Access != nil && !strings.Contains(string(want), `"data":{"bytes":`) {
				t.Fatalf("the typed data is not in %s", want)
			}
			got, err := encodeEvent(tt.ev)
			if (err != nil) != (wantErr != nil) || string(got) != string(want) {
				t.Fatalf("encodeEvent = %s, %v\njson.Marshal = %s, %v", got, err, want, wantErr)
			}
		})
	}
}

// TestEncodeEventsAsEncodeEvent: a batch's bodies are each event's encodeEvent, an
// event json.Marshal refuses (nil) among them.
func TestEncodeEventsAsEncodeEvent(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 59, 58, 123456789, time.UTC)
	evs := []Event{
		{Type: "preview.accessed", Tenant: "a", SandboxID: "s1", Time: at, Access: &AccessData{Port: 8000, Method: "GET", Path: "/", Status: 200, DurationMs: 0.5, Credential: "cookie"}},
		{Type: "command.started", Tenant: "b", Time: at, Data: map[string]any{"command": "echo \"<x>\""}}, // json.Marshal's
		{Type: "x", Tenant: "a", Time: at, Data: map[string]any{"bad": make(chan int)}},                   // not encodable
		{Type: "preview.accessed", Tenant: "a", SandboxID: "s2", Time: at, Access: &AccessData{Path: "/<escaped>"}},
		{Type: "sandbox.deleted", Tenant: "a", Time: at},
	}
	bodies := encodeEvents(evs)
	if len(bodies) != len(evs) {
		t.Fatalf("%d bodies for %d events", len(bodies), len(evs))
	}
	for i, ev := range evs {
		want, err := encodeEvent(ev)
		if err != nil {
			if bodies[i] != nil {
				t.Errorf("event %d: body %v for an event encodeEvent refuses (%v)", i, bodies[i], err)
			}
			continue
		}
		got, ok := bodies[i].(*string)
		if !ok || *got != string(want) {
			t.Errorf("event %d: body %v, want %s", i, bodies[i], want)
		}
	}
}

// BenchmarkEncodeEvent: one preview.accessed event, encodeEvent beside json.Marshal.
func BenchmarkEncodeEvent(b *testing.B) {
	ev := Event{Type: "preview.accessed", Tenant: "default", SandboxID: "0b5c8f0e-1f1d-4c55-9f0a-1c2d3e4f5a6b", Time: time.Now().UTC(), Data: map[string]any{
		"port": 8000, "method": "GET", "path": "/headers", "status": 200, "bytes": int64(512), "durationMs": 1.234, "credential": "accessToken"}}
	b.Run("encodeEvent", func(b *testing.B) {
		for b.Loop() {
			_, _ = encodeEvent(ev)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(ev)
		}
	})
}
