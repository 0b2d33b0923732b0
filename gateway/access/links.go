package access

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/linksign"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// linkKeyRefresh is how long loaded signing keys are used before they are read again,
// so that a rotation on one gateway reaches the others without a restart.
const linkKeyRefresh = 5 * time.Second

// linkKeys are the signing keys as this gateway last loaded them.
type linkKeys struct {
	mu       sync.RWMutex
	keys     map[string][]byte // kid → secret
	current  string
	loadedAt time.Time
}

// linkKeys returns the signing keys, loading (and on first use creating) them in Redis so
// that every gateway signs and verifies alike.
func (m *Manager) linkKeys(ctx context.Context) (map[string][]byte, string, error) {
	m.links.mu.RLock()
	keys, cur, at := m.links.keys, m.links.current, m.links.loadedAt
	m.links.mu.RUnlock()
	if cur != "" && time.Since(at) < linkKeyRefresh {
		return keys, cur, nil
	}
	prevKeys, prevCur := keys, cur
	raw, cur, err := m.store.LinkKeys(ctx)
	if err != nil {
		// Through a Redis outage the keys already loaded keep signing and verifying, so
		// that previews keep working; a rotation made meanwhile is picked up after it.
		if prevCur != "" && errors.Is(err, store.ErrUnavailable) {
			return prevKeys, prevCur, nil
		}
		return nil, "", err
	}
	if cur == "" {
		if _, err := m.store.RotateLinkKey(ctx, randomToken(4), randomToken(32)); err != nil {
			return nil, "", err
		}
		raw, cur, err = m.store.LinkKeys(ctx)
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
	m.links.mu.Lock()
	m.links.keys, m.links.current, m.links.loadedAt = keys, cur, time.Now()
	m.links.mu.Unlock()
	return keys, cur, nil
}

// RotateLinkKeys makes a new signing key current; links signed with the previous key stay
// valid until they expire, older ones stop working.
func (m *Manager) RotateLinkKeys(ctx context.Context, caller principal.Caller) (string, error) {
	if !caller.Admin {
		return "", fault.Errorf(fault.KindForbidden, fault.CodeForbidden, "only the platform admin rotates signing keys")
	}
	kid, err := m.store.RotateLinkKey(ctx, randomToken(4), randomToken(32))
	if err != nil {
		return "", err
	}
	m.links.mu.Lock()
	m.links.loadedAt = time.Time{}
	m.links.mu.Unlock()
	return kid, nil
}

// signToken makes a linksign token bound to purpose, sandbox, port and expiry under the
// current key.
func (m *Manager) signToken(ctx context.Context, purpose, sandbox string, port int, exp time.Time) (string, error) {
	keys, cur, err := m.linkKeys(ctx)
	if err != nil {
		return "", err
	}
	return linksign.Sign(cur, keys[cur], purpose, sandbox, port, exp), nil
}

// verifyToken checks a token made by signToken and returns its expiry; expiry is judged
// on the gateway's clock (Host.Now).
func (m *Manager) verifyToken(ctx context.Context, purpose, token, sandbox string, port int) (time.Time, error) {
	// A malformed token is refused before the keys are read (no store round trip).
	if !linksign.WellFormed(token) {
		return time.Time{}, fault.Errorf(fault.KindUnauthenticated, CodeLinkInvalid, "%s", linksign.ErrMalformed.Error())
	}
	keys, _, err := m.linkKeys(ctx)
	if err != nil {
		return time.Time{}, err
	}
	expires, err := linksign.Verify(keys, purpose, token, sandbox, port, m.host.Now())
	switch {
	case errors.Is(err, linksign.ErrExpired):
		return time.Time{}, fault.Errorf(fault.KindUnauthenticated, CodeLinkExpired, "%s", err.Error())
	case err != nil:
		return time.Time{}, fault.Errorf(fault.KindUnauthenticated, CodeLinkInvalid, "%s", err.Error())
	}
	return expires, nil
}

// SignLink returns a token for a browser link to port of a sandbox, valid until exp.
func (m *Manager) SignLink(ctx context.Context, sandbox string, port int, exp time.Time) (string, error) {
	return m.signToken(ctx, "link", sandbox, port, exp)
}

// VerifyLink checks a signed link token and returns its expiry.
func (m *Manager) VerifyLink(ctx context.Context, token, sandbox string, port int) (time.Time, error) {
	return m.verifyToken(ctx, "link", token, sandbox, port)
}

// SessionCookie turns a verified link into the value of the cookie that replaces it.
func (m *Manager) SessionCookie(ctx context.Context, sandbox string, port int, exp time.Time) (string, error) {
	return m.signToken(ctx, "cookie", sandbox, port, exp)
}

// VerifyCookie checks a preview session cookie.
func (m *Manager) VerifyCookie(ctx context.Context, value, sandbox string, port int) error {
	_, err := m.verifyToken(ctx, "cookie", value, sandbox, port)
	return err
}
