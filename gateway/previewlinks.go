package gateway

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/linksign"
	"github.com/sandgate/sandgate/gateway/store"
)

// previewState holds link keys and access bookkeeping.
type previewState struct {
	mu       sync.RWMutex
	keys     map[string][]byte // kid → secret
	current  string
	loadedAt time.Time

	activityMu   sync.Mutex
	lastActivity map[string]time.Time
	// touches holds activity due to be written (sandboxes without renew-on-access),
	// which the access log writer sends in one command per flush (runAccessLog).
	touches map[string]time.Time

	events  eventQueue
	dropped atomic.Int64
}

func newPreviewState() previewState {
	return previewState{keys: map[string][]byte{}, lastActivity: map[string]time.Time{}, touches: map[string]time.Time{}, events: eventQueue{wake: make(chan struct{}, 1)}}
}

// Bounds of the event queue (queueEvent): the writer takes a batch when eventBatch
// events are waiting, or at its next tick; beyond eventQueueMax waiting events new
// ones are dropped and counted.
const (
	eventBatch    = 256
	eventQueueMax = 8192
)

// eventQueue holds events for the batched writer (runAccessLog). A request appends
// under a lock and wakes the writer only once per eventBatch: a channel send per event
// woke the writer's goroutine (and often an idle thread) on every proxied request.
type eventQueue struct {
	mu      sync.Mutex
	pending []store.Event
	wake    chan struct{} // capacity 1: a batch is ready
}

// push queues ev; false when the queue is full.
func (q *eventQueue) push(ev store.Event) bool {
	q.mu.Lock()
	if len(q.pending) >= eventQueueMax {
		q.mu.Unlock()
		return false
	}
	q.pending = append(q.pending, ev)
	full := len(q.pending) == eventBatch
	q.mu.Unlock()
	if full {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take appends the waiting events to dst, oldest first, and empties the queue.
func (q *eventQueue) take(dst []store.Event) []store.Event {
	q.mu.Lock()
	dst = append(dst, q.pending...)
	if cap(q.pending) > 4*eventBatch {
		q.pending = nil // release a queue grown while the writer waited for Redis
	} else {
		clear(q.pending)
		q.pending = q.pending[:0]
	}
	q.mu.Unlock()
	return dst
}

// linkKeys returns the signing keys, loading (and on first use creating) them in Redis so
// that every gateway signs and verifies alike. They are re-read every few seconds so that
// a rotation on one gateway reaches the others without a restart.
func (s *Service) linkKeys(ctx context.Context) (map[string][]byte, string, error) {
	s.preview.mu.RLock()
	keys, cur, at := s.preview.keys, s.preview.current, s.preview.loadedAt
	s.preview.mu.RUnlock()
	if cur != "" && time.Since(at) < 5*time.Second {
		return keys, cur, nil
	}
	prevKeys, prevCur := keys, cur
	raw, cur, err := s.store.LinkKeys(ctx)
	if err != nil {
		// Through a Redis outage the keys already loaded keep signing and verifying, so
		// that previews keep working; a rotation made meanwhile is picked up after it.
		if prevCur != "" && errors.Is(err, store.ErrUnavailable) {
			return prevKeys, prevCur, nil
		}
		return nil, "", err
	}
	if cur == "" {
		if _, err := s.store.RotateLinkKey(ctx, randomToken(4), randomToken(32)); err != nil {
			return nil, "", err
		}
		raw, cur, err = s.store.LinkKeys(ctx)
		if err != nil {
			return nil, "", err
		}
	}
	keys = make(map[string][]byte, len(raw))
	for kid, hexKey := range raw {
		if b, err := hex.DecodeString(hexKey); err == nil {
			keys[kid] = b
		}
	}
	s.preview.mu.Lock()
	s.preview.keys, s.preview.current, s.preview.loadedAt = keys, cur, time.Now()
	s.preview.mu.Unlock()
	return keys, cur, nil
}

// RotateLinkKeys makes a new signing key current; links signed with the previous key stay
// valid until they expire, older ones stop working.
func (s *Service) RotateLinkKeys(ctx context.Context, caller Caller) (string, error) {
	if !caller.Admin {
		return "", Errorf(KindForbidden, CodeForbidden, "only the platform admin rotates signing keys")
	}
	kid, err := s.store.RotateLinkKey(ctx, randomToken(4), randomToken(32))
	if err != nil {
		return "", err
	}
	s.preview.mu.Lock()
	s.preview.loadedAt = time.Time{}
	s.preview.mu.Unlock()
	return kid, nil
}

// signToken makes a linksign token bound to purpose, sandbox, port and expiry under the
// current key.
func (s *Service) signToken(ctx context.Context, purpose, sandbox string, port int, exp time.Time) (string, error) {
	keys, cur, err := s.linkKeys(ctx)
	if err != nil {
		return "", err
	}
	return linksign.Sign(cur, keys[cur], purpose, sandbox, port, exp), nil
}

// verifyToken checks a token made by signToken and returns its expiry; expiry is judged
// on the gateway's clock (clock.go).
func (s *Service) verifyToken(ctx context.Context, purpose, token, sandbox string, port int) (time.Time, error) {
	// A malformed token is refused before the keys are read (no store round trip).
	if !linksign.WellFormed(token) {
		return time.Time{}, Errorf(KindUnauthenticated, CodeLinkInvalid, "%s", linksign.ErrMalformed.Error())
	}
	keys, _, err := s.linkKeys(ctx)
	if err != nil {
		return time.Time{}, err
	}
	expires, err := linksign.Verify(keys, purpose, token, sandbox, port, s.now())
	switch {
	case errors.Is(err, linksign.ErrExpired):
		return time.Time{}, Errorf(KindUnauthenticated, CodeLinkExpired, "%s", err.Error())
	case err != nil:
		return time.Time{}, Errorf(KindUnauthenticated, CodeLinkInvalid, "%s", err.Error())
	}
	return expires, nil
}

// SignLink returns a token for a browser link to port of a sandbox, valid until exp.
func (s *Service) SignLink(ctx context.Context, sandbox string, port int, exp time.Time) (string, error) {
	return s.signToken(ctx, "link", sandbox, port, exp)
}

// VerifyLink checks a signed link token.
func (s *Service) VerifyLink(ctx context.Context, token, sandbox string, port int) (time.Time, error) {
	return s.verifyToken(ctx, "link", token, sandbox, port)
}

// SessionCookie turns a verified link into the value of the cookie that replaces it.
func (s *Service) SessionCookie(ctx context.Context, sandbox string, port int, exp time.Time) (string, error) {
	return s.signToken(ctx, "cookie", sandbox, port, exp)
}

// VerifyCookie checks a preview session cookie.
func (s *Service) VerifyCookie(ctx context.Context, value, sandbox string, port int) error {
	_, err := s.verifyToken(ctx, "cookie", value, sandbox, port)
	return err
}
