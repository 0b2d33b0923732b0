package linksign

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	keys := map[string][]byte{"k1": []byte("secret-one"), "k2": []byte("secret-two")}
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour)
	tok := Sign("k1", keys["k1"], "link", "sb-1", 8080, exp)
	if got, err := Verify(keys, "link", tok, "sb-1", 8080, now); err != nil || !got.Equal(exp) {
		t.Fatalf("Verify = %s, %v", got, err)
	}
	other := Sign("k2", keys["k2"], "link", "sb-1", 8080, exp)
	tests := []struct {
		name, purpose, token, sandbox string
		port                          int
		at                            time.Time
		keys                          map[string][]byte
		want                          error
	}{
		{"other purpose", "cookie", tok, "sb-1", 8080, now, keys, ErrInvalid},
		{"other sandbox", "link", tok, "sb-2", 8080, now, keys, ErrInvalid},
		{"other port", "link", tok, "sb-1", 8081, now, keys, ErrInvalid},
		{"key rotated out", "link", tok, "sb-1", 8080, now, map[string][]byte{"k2": keys["k2"]}, ErrInvalid},
		{"kid swapped", "link", "k2" + strings.TrimPrefix(tok, "k1"), "sb-1", 8080, now, keys, ErrInvalid},
		{"expiry changed", "link", strings.Replace(tok, ".1800003600.", ".1800007200.", 1), "sb-1", 8080, now, keys, ErrInvalid},
		{"expired", "link", tok, "sb-1", 8080, exp.Add(time.Second), keys, ErrExpired},
		{"two parts", "link", "k1.123", "sb-1", 8080, now, keys, ErrMalformed},
		{"expiry not a number", "link", "k1.soon.mac", "sb-1", 8080, now, keys, ErrMalformed},
		{"other key valid", "link", other, "sb-1", 8080, now, keys, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(tt.keys, tt.purpose, tt.token, tt.sandbox, tt.port, tt.at)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if WellFormed(tt.token) == errors.Is(tt.want, ErrMalformed) {
				t.Errorf("WellFormed(%q) disagrees with Verify", tt.token)
			}
		})
	}
}
