package guest

import (
	"strings"
	"testing"
	"time"
)

func TestParseTTLInput(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	in, err := ParseTTLInput([]byte(`{"sandboxId":"x","reason":"activity","now":"2026-11-30T10:00:00Z",
		"currentExpiresAt":"2026-11-30T10:05:00.5Z","maxExpiresAt":"2026-12-01T00:00:00Z",
		"activity":{"port":8080,"method":"GET","path":"/"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := TTLInput{Reason: "activity", Now: at("2026-11-30T10:00:00Z"), CurrentExpiresAt: at("2026-11-30T10:05:00.5Z"), HasActivity: true, ActivityPort: 8080}
	if in != want {
		t.Fatalf("got %+v, want %+v", in, want)
	}
	in, err = ParseTTLInput([]byte(`{"reason":"renew","now":"2026-11-30T10:00:00Z","currentExpiresAt":"2026-11-30T10:05:00Z","requestedExpiresAt":"2026-11-30T11:00:00Z"}`))
	if err != nil || in.Reason != "renew" || !in.RequestedExpiresAt.Equal(at("2026-11-30T11:00:00Z")) || in.HasActivity {
		t.Fatalf("renew: %+v, %v", in, err)
	}
	for _, tt := range []struct{ doc, wantErr string }{
		{`[1]`, "not a JSON object"},
		{`{"reason":"activity","currentExpiresAt":"2026-11-30T10:05:00Z"}`, "now is missing"},
		{`{"now":"2026-11-30T10:00:00Z","currentExpiresAt":5}`, "currentExpiresAt is not a string"},
		{`{"now":"yesterday","currentExpiresAt":"2026-11-30T10:05:00Z"}`, "now:"},
		{`{"now":"2026-11-30T10:00:00Z","currentExpiresAt":"2026-11-30T10:05:00Z","requestedExpiresAt":"soon"}`, "requestedExpiresAt:"},
	} {
		if _, err := ParseTTLInput([]byte(tt.doc)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want one with %q", tt.doc, err, tt.wantErr)
		}
	}
}
