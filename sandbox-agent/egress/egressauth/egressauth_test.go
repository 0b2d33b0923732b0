package egressauth

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	start := time.Now()
	body := []byte(`{"defaultAction":"deny"}`)
	newReq := func(key string, signedAt time.Time, sent []byte) *http.Request {
		r, _ := http.NewRequest("PUT", "http://10.0.0.1:18080/policy?x=1", strings.NewReader(string(sent)))
		Sign(r, key, body, signedAt)
		return r
	}
	tests := []struct {
		name string
		req  func() *http.Request
		want error
	}{
		{"good", func() *http.Request { return newReq("k", start.Add(time.Second), body) }, nil},
		{"unsigned", func() *http.Request { r, _ := http.NewRequest("GET", "http://x/policy", nil); return r }, ErrMissing},
		{"wrong_key", func() *http.Request { return newReq("other", start.Add(time.Second), body) }, ErrBadSig},
		{"before_start", func() *http.Request { return newReq("k", start.Add(-time.Millisecond), body) }, ErrStale},
		{"future", func() *http.Request { return newReq("k", start.Add(MaxSkew+time.Minute), body) }, ErrStale},
		{"other_path", func() *http.Request {
			r := newReq("k", start.Add(time.Second), body)
			r.URL.Path = "/policy/x"
			return r
		}, ErrBadSig},
		{"other_method", func() *http.Request {
			r := newReq("k", start.Add(time.Second), body)
			r.Method = "POST"
			return r
		}, ErrBadSig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := NewVerifier("k", start)
			_, err := v.Verify(tt.req(), body, start.Add(2*time.Second))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("replay", func(t *testing.T) {
		v := NewVerifier("k", start)
		r := newReq("k", start.Add(time.Second), body)
		if _, err := v.Verify(r, body, start.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(r, body, start.Add(3*time.Second)); !errors.Is(err, ErrReplayed) {
			t.Fatalf("replay: %v", err)
		}
		// Once out of the window, the timestamp refuses it.
		if _, err := v.Verify(r, body, start.Add(MaxSkew+time.Hour)); !errors.Is(err, ErrStale) {
			t.Fatalf("old replay: %v", err)
		}
	})
	t.Run("response", func(t *testing.T) {
		sig := SignResponse("k", "nonce-0123456789abcdef", 200, []byte("ok"))
		if !VerifyResponse("k", "nonce-0123456789abcdef", 200, []byte("ok"), sig) {
			t.Fatal("good response refused")
		}
		for _, bad := range []struct {
			nonce  string
			status int
			body   string
		}{{"nonce-other", 200, "ok"}, {"nonce-0123456789abcdef", 500, "ok"}, {"nonce-0123456789abcdef", 200, "ko"}} {
			if VerifyResponse("k", bad.nonce, bad.status, []byte(bad.body), sig) {
				t.Fatalf("altered response %v accepted", bad)
			}
		}
		if VerifyResponse("other", "nonce-0123456789abcdef", 200, []byte("ok"), sig) {
			t.Fatal("response of another key accepted")
		}
	})
}
