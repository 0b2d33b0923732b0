package signedhttp

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// testScheme is a scheme as the egress enforcer's: two minutes of skew.
var testScheme = NewScheme("Test", 2*time.Minute)

const MaxSkew = 2 * time.Minute

func NewVerifier(key string, notBefore time.Time) *Verifier {
	return testScheme.NewVerifier(key, notBefore, 1000)
}

func Sign(r *http.Request, key string, body []byte, now time.Time) string {
	return testScheme.Sign(r, key, body, now)
}

func SignResponse(key, nonce string, status int, body []byte) string {
	return testScheme.SignResponse(key, nonce, status, body)
}

func VerifyResponse(key, nonce string, status int, body []byte, sig string) bool {
	return testScheme.VerifyResponse(key, nonce, status, body, sig)
}

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
		// Timestamps carry milliseconds: one signed in the start's own millisecond (a
		// client that calls at once) is not before the start.
		{"in_the_start_millisecond", func() *http.Request { return newReq("k", start, body) }, nil},
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

// TestSchemesAreApart: a request or an answer signed in one scheme is worthless in
// another with the same key (an enforcer's signature never passes for an agent's).
func TestSchemesAreApart(t *testing.T) {
	start := time.Now()
	other := NewScheme("Other", MaxSkew)
	r, _ := http.NewRequest("GET", "http://10.0.0.1/ping", nil)
	nonce := other.Sign(r, "k", nil, start.Add(time.Second))
	for _, h := range []string{other.HeaderTimestamp, other.HeaderNonce, other.HeaderSignature} {
		r.Header.Set(strings.Replace(h, "Other", "Test", 1), r.Header.Get(h))
	}
	if _, err := NewVerifier("k", start).Verify(r, nil, start.Add(2*time.Second)); !errors.Is(err, ErrBadSig) {
		t.Fatalf("a request of another scheme: %v", err)
	}
	if VerifyResponse("k", nonce, 200, nil, other.SignResponse("k", nonce, 200, nil)) {
		t.Fatal("an answer of another scheme was accepted")
	}
}

// TestReplayRefusedWhileFresh: a nonce is remembered as long as its timestamp can pass
// (across the verifier's generations), and the verifier refuses rather than forgets
// when it is full.
func TestReplayRefusedWhileFresh(t *testing.T) {
	start := time.Now()
	v := NewVerifier("k", start)
	// Signed MaxSkew ahead of the verifier's clock: fresh until 2×MaxSkew after it is seen.
	seen := start.Add(time.Second)
	r, _ := http.NewRequest("GET", "http://x/ping", nil)
	Sign(r, "k", nil, seen.Add(MaxSkew-time.Millisecond))
	if _, err := v.Verify(r, nil, seen); err != nil {
		t.Fatal(err)
	}
	for at := seen; at.Before(seen.Add(2*MaxSkew - 2*time.Millisecond)); at = at.Add(MaxSkew / 7) {
		// Other traffic moves the generations on.
		o, _ := http.NewRequest("GET", "http://x/other", nil)
		Sign(o, "k", nil, at)
		if _, err := v.Verify(o, nil, at); err != nil {
			t.Fatalf("other request at +%s: %v", at.Sub(seen), err)
		}
		if _, err := v.Verify(r, nil, at); !errors.Is(err, ErrReplayed) {
			t.Fatalf("replay at +%s: %v, want ErrReplayed", at.Sub(seen), err)
		}
	}
	full := testScheme.NewVerifier("k", start, 2)
	for i := range 3 {
		q, _ := http.NewRequest("GET", "http://x/ping", nil)
		Sign(q, "k", nil, seen)
		_, err := full.Verify(q, nil, seen)
		if want := (i == 2); errors.Is(err, ErrBusy) != want {
			t.Fatalf("request %d to a verifier of 2 nonces: %v", i, err)
		}
	}
}
