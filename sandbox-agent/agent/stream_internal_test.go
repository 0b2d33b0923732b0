package agent

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// TestAppendTextEvent checks the hand-written encoder against encoding/json.
func TestAppendTextEvent(t *testing.T) {
	tests := []struct {
		name string
		text string
	}{
		{"empty", ""},
		{"plain", "hello world"},
		{"quotes and backslashes", `say "hi" \ bye`},
		{"controls", "a\tb\rc\x00d\x1fe\x7f"},
		{"unicode", "héllo 世界 🚀"},
		{"invalid utf-8", "bad \xff\xfe bytes \xe2\x82"},
		{"line separators", "a\u2028b\u2029c"},
		{"html stays", "<b>&</b>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := Event{Type: EventStdout, Text: tt.text, Timestamp: 1700000000000}
			got := appendTextEvent(nil, ev)
			var back Event
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("invalid JSON %q: %v", got, err)
			}
			want, _ := json.Marshal(ev)
			var wantBack Event
			_ = json.Unmarshal(want, &wantBack)
			if back.Type != wantBack.Type || back.Text != wantBack.Text || back.Timestamp != wantBack.Timestamp {
				t.Fatalf("decoded %+v, want %+v (encoded %q)", back, wantBack, got)
			}
		})
	}
}

func TestPendingBytes(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if n := procs.PendingBytes(r); n != 0 {
		t.Fatalf("empty pipe: %d", n)
	}
	_, _ = w.Write([]byte("hello"))
	if n := procs.PendingBytes(r); n != 5 {
		t.Fatalf("pending %d, want 5", n)
	}
	// Deadlines must still work after the check (the pipe stays non-blocking).
	buf := make([]byte, 16)
	_, _ = r.Read(buf)
	_ = r.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after deadline: %v", err)
	}
}
