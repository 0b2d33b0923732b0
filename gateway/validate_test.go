package gateway

import (
	"strings"
	"testing"
)

func TestParseCPU(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"500m", 500, true}, {"1", 1000, true}, {"0.5", 500, true}, {" 2 ", 2000, true}, {"1024", 1024000, true},
		{"0", 0, false}, {"-1", 0, false}, {"0m", 0, false}, {"1.5m", 0, false}, {"lots", 0, false},
		{"", 0, false}, {"1025", 0, false}, {"Inf", 0, false}, {"NaN", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseCPU(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParseCPU(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512Mi", 512 << 20, true}, {"2Gi", 2 << 30, true}, {"1G", 1e9, true}, {"6Mi", 6 << 20, true},
		{"104857600", 100 << 20, true}, {"0.5Gi", 512 << 20, true}, {"10M", 10e6, true},
		{"5Mi", 0, false}, {"1024", 0, false}, {"0", 0, false}, {"-1Gi", 0, false}, {"Gi", 0, false},
		{"much", 0, false}, {"2Pi", 0, false}, {"2048Ti", 0, false}, {"", 0, false}, {"NaN", 0, false}, {"NaNMi", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMemory(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParseMemory(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestValidateMetadata(t *testing.T) {
	tests := []struct {
		name          string
		md            map[string]string
		allowReserved bool
		wantErr       string
	}{
		{"plain", map[string]string{"project": "demo", "a.b-c_d": ""}, false, ""},
		{"prefixed", map[string]string{"example.com/team": "x1"}, false, ""},
		{"reserved sandgate", map[string]string{ReservedMetadataPrefix + "batch": "b"}, false, "reserved"},
		{"reserved allowed", map[string]string{ReservedMetadataPrefix + "batch": "b"}, true, ""},
		{"reserved opensandbox", map[string]string{"opensandbox.io/x": "b"}, false, "reserved"},
		{"uppercase prefix", map[string]string{"Example.com/team": "x"}, false, "prefix"},
		{"empty name", map[string]string{"example.com/": "x"}, false, "name must be"},
		{"bad key", map[string]string{"bad key!": "x"}, false, "name must be"},
		{"long key", map[string]string{strings.Repeat("k", 64): "x"}, false, "name must be"},
		{"bad value", map[string]string{"k": "has space"}, false, "metadata value"},
		{"long value", map[string]string{"k": strings.Repeat("v", 64)}, false, "metadata value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateMetadata(tt.md, tt.allowReserved)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			e, ok := AsError(err)
			if !ok || e.Kind != KindInvalid || e.Code != CodeInvalidMetadata || !strings.Contains(e.Message, tt.wantErr) {
				t.Fatalf("error = %v, want a 400 %s naming %q", err, CodeInvalidMetadata, tt.wantErr)
			}
		})
	}
}
