package gateway

import (
	"strings"
	"testing"
)

func TestParsePort(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"1", 1, true}, {"8080", 8080, true}, {"18080", 18080, true}, {"65535", 65535, true},
		{"0", 0, false}, {"018080", 0, false}, {"+8080", 0, false}, {"-1", 0, false},
		{" 8080", 0, false}, {"8080 ", 0, false}, {"65536", 0, false}, {"99999", 0, false},
		{"", 0, false}, {"0x50", 0, false}, {"८०", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePort(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParsePort(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestValidateImageRef(t *testing.T) {
	for _, ok := range []string{"sandgate/base:0.1.0", "python:3.11-slim", "127.0.0.1:5000/sandgate/base:test", "busybox",
		"ghcr.io/org/app@sha256:" + "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1",
		"sha256:a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1",
		// Hex-looking names are names (docker.io/library/b2), handed to the engine in full.
		"b2", "0123456789ab"} {
		if err := validateImageRef(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"Not A/Valid::Image", "library/UPPER", "a\x00b", "image:", ":tag", "a//b",
		// An id is a full one: a prefix could match any image the engine holds.
		"sha256:b2", "sha256:0123456789ab", "sha256:" + strings.Repeat("a", 63),
		strings.Repeat("a", 64)} {
		if err := validateImageRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
