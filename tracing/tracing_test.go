package tracing

import (
	"testing"
	"time"
)

func TestParseServerTiming(t *testing.T) {
	for _, tt := range []struct {
		entry string
		name  string
		dur   time.Duration
		ok    bool
	}{
		{"spawn;dur=1.5", "spawn", 1500 * time.Microsecond, true},
		{" file-upload ; dur=12", "file-upload", 12 * time.Millisecond, true},
		{"spawn", "", 0, false},
		{"Spawn;dur=1", "", 0, false},
		{"a.b;dur=1", "", 0, false},
		{"spawn;dur=-1", "", 0, false},
		{"spawn;dur=NaN", "", 0, false},
		{"spawn;dur=99999999999", "", 0, false},
		{"averyveryveryveryveryverylongstepname;dur=1", "", 0, false},
	} {
		t.Run(tt.entry, func(t *testing.T) {
			name, dur, ok := parseServerTiming(tt.entry)
			if name != tt.name || dur != tt.dur || ok != tt.ok {
				t.Fatalf("parseServerTiming(%q) = %q %v %v, want %q %v %v", tt.entry, name, dur, ok, tt.name, tt.dur, tt.ok)
			}
		})
	}
}
