package access

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// An access header value (what GET /sandboxes/{id}/endpoints/{port} hands out in
// "headers") is bound to the sandbox's current access secret and to the key that
// fetched it:
//
//	sga1.<key id>.<base64url HMAC-SHA256(secret, sandbox id, key id, hash of the key)>
//
// SDKs fetch these headers once and send them on every call, so the value must die
// with what it was derived from: rotating the sandbox's secret
// (POST /sandboxes/{id}/access/rotate) invalidates every value at once, and revoking
// the key (or changing the platform key) invalidates the values it fetched.
//
// The key's stored hash is read from Redis once and then kept in memory (keyBindingTTL),
// not read on every proxied request: a revocation drops it at once on the gateway that
// revoked, and is published (KeyChangePrefix on the changes channel) so that every other
// gateway drops it within milliseconds; keyBindingTTL bounds a missed message.

// AccessValuePrefix starts every key-bound access header value.
const AccessValuePrefix = "sga1."

// HeaderValue derives the access header value of sb for the key keyID.
func (m *Manager) HeaderValue(ctx context.Context, sb *store.Sandbox, keyID string) (string, error) {
	binding, err := m.keyBinding(ctx, keyID)
	if err != nil {
		return "", err
	}
	return AccessValuePrefix + keyID + "." + accessMAC(sb, keyID, binding), nil
}

func accessMAC(sb *store.Sandbox, keyID, binding string) string {
	m := hmac.New(sha256.New, []byte(sb.AccessToken))
	m.Write([]byte(sb.ID + "\n" + keyID + "\n" + binding))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// macInputs are everything accessMAC derives a value from.
type macInputs struct{ sandbox, secret, keyID, binding string }

// knownMACs memoizes accessMAC for the proxy's check of every request (an HMAC and its
// allocations per request otherwise): the MAC is a pure function of macInputs, so a
// rotated secret or a changed key hash is another entry, never a stale answer. Bounded:
// emptied when it holds maxKnownMACs.
var knownMACs struct {
	sync.Mutex
	m map[macInputs]string
}

const maxKnownMACs = 1 << 14

// cachedAccessMAC is accessMAC, memoized in knownMACs.
func cachedAccessMAC(sb *store.Sandbox, keyID, binding string) string {
	in := macInputs{sb.ID, sb.AccessToken, keyID, binding}
	knownMACs.Lock()
	mac, ok := knownMACs.m[in]
	knownMACs.Unlock()
	if ok {
		return mac
	}
	mac = accessMAC(sb, keyID, binding)
	knownMACs.Lock()
	if knownMACs.m == nil || len(knownMACs.m) >= maxKnownMACs {
		knownMACs.m = make(map[macInputs]string)
	}
	knownMACs.m[in] = mac
	knownMACs.Unlock()
	return mac
}

// adminBinding memoizes the platform key's hash (store.HashKey) for keyBinding.
var adminBinding atomic.Pointer[[2]string] // key, hash

func hashAdminKey(admin string) string {
	if p := adminBinding.Load(); p != nil && p[0] == admin {
		return p[1]
	}
	hash := store.HashKey(admin)
	adminBinding.Store(&[2]string{admin, hash})
	return hash
}

// keyBindingTTL bounds how long a key's hash is used without reading it again, should
// the message of its revocation be missed (the same bound as the core's route cache).
const keyBindingTTL = time.Second

// KeyChangePrefix marks a key id published on the changes channel (sandbox ids are
// UUIDs): the core publishes a revocation so, and hands what arrives to KeyChanged.
const KeyChangePrefix = "key:"

// knownBinding is a key's hash as last read from Redis.
type knownBinding struct {
	hash    string
	fetched time.Time
}

// keyBinding is what ties a value to its key: the stored hash of an issued key, the
// hash of the configured platform key for "admin". ErrNotFound when the key is gone.
func (m *Manager) keyBinding(ctx context.Context, keyID string) (string, error) {
	if keyID == principal.AdminKeyID {
		admin := m.host.AdminKey()
		if admin == "" {
			return "", store.ErrNotFound
		}
		return hashAdminKey(admin), nil
	}
	if keyID == "" {
		return "", store.ErrNotFound
	}
	known, ok := m.keyBindings.Load(keyID)
	if ok && time.Since(known.(knownBinding).fetched) <= keyBindingTTL {
		return known.(knownBinding).hash, nil
	}
	fetched := time.Now()
	hash, err := m.store.KeyHashByID(ctx, keyID)
	switch {
	case err == nil:
		m.keyBindings.Store(keyID, knownBinding{hash: hash, fetched: fetched})
	case errors.Is(err, store.ErrNotFound):
		m.keyBindings.Delete(keyID)
	case errors.Is(err, store.ErrUnavailable):
		// Through a Redis outage the proxy keeps serving known sandboxes (the core's
		// record cache): a key this gateway saw answer before the outage stays bound to
		// it, and a revocation made meanwhile takes effect with the first answer after it.
		if ok {
			return known.(knownBinding).hash, nil
		}
	}
	return hash, err
}

// KeyChanged makes the next use of keyID's binding read it from Redis again (it was
// revoked, here or on another gateway); the last value stays the outage fallback only
// until then.
func (m *Manager) KeyChanged(keyID string) {
	if known, ok := m.keyBindings.Load(keyID); ok {
		m.keyBindings.Store(keyID, knownBinding{hash: known.(knownBinding).hash})
	}
}

// KeyBindingsStale makes every binding be read again (after a resubscription to the
// changes channel, which may have missed revocations, or a store that came back empty).
func (m *Manager) KeyBindingsStale() {
	m.keyBindings.Range(func(id, known any) bool {
		m.keyBindings.Store(id, knownBinding{hash: known.(knownBinding).hash})
		return true
	})
}

// VerifyAccessValue checks an access header value against sb's current secret and
// the key it was issued to. A well-formed value whose MAC is right but whose key was
// revoked gets its own code, so that a client knows to fetch the endpoint again with
// a live key.
func (m *Manager) VerifyAccessValue(ctx context.Context, sb *store.Sandbox, value string) error {
	bad := func() error {
		return fault.Errorf(fault.KindForbidden, fault.CodeForbidden, "the access token is not valid for sandbox %s (it may have been rotated: fetch the endpoint again)", sb.ID)
	}
	rest, ok := strings.CutPrefix(value, AccessValuePrefix)
	if !ok || sb.AccessToken == "" {
		return bad()
	}
	keyID, mac, ok := strings.Cut(rest, ".")
	if !ok || keyID == "" || len(keyID) > 64 {
		return bad()
	}
	binding, err := m.keyBinding(ctx, keyID)
	if errors.Is(err, store.ErrNotFound) {
		return fault.Errorf(fault.KindForbidden, CodeAccessRevoked, "the access token of sandbox %s was issued to a key that has been revoked: fetch the endpoint again with a valid key", sb.ID)
	}
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(mac), []byte(cachedAccessMAC(sb, keyID, binding))) {
		return bad()
	}
	return nil
}

// RotateAccess replaces a sandbox's access secret: every access header value handed
// out before stops working at once, on every gateway (the change is published and
// drops their cached routes).
func (m *Manager) RotateAccess(ctx context.Context, caller principal.Caller, id string) error {
	if _, err := m.host.Lookup(ctx, caller, id); err != nil {
		return err
	}
	sb, err := m.store.ModifySandbox(ctx, id, func(sb *store.Sandbox) error {
		sb.AccessToken = randomToken(24)
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return fault.NotFound(id)
	}
	if err != nil {
		return err
	}
	m.host.DropRoute(id)
	m.host.Emit(ctx, sb, "sandbox.access.rotated", map[string]any{"key": caller.KeyID, "time": time.Now().UTC()})
	return nil
}
