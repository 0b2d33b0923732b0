// Package access is the gateway's feature of who may reach a sandbox's ports and the
// console, and what each proxied request leaves behind. A Manager owns: the signing keys
// of preview links and cookies, kept in the store and re-read so that a rotation on one
// gateway reaches the others (links.go; the signing itself is package gateway/linksign);
// the key-bound access header values and the cache of keys' hashes they are checked
// against (values.go); console sign-in sessions and their CSRF token (sessions.go); the
// credential a proxied request presented, verified, and its access decision, public
// ports included (proxy.go); and the
// activity of proxied requests: access events, last activity and renew-on-access, with a
// decide_ttl plugin's say (activity.go). It reaches the core only through Host (host.go):
// the gateway's clock, API keys, a sandbox the caller may see, the route cache and the
// event pipeline; the store, the policy engine and the metrics it uses directly. It
// never imports package gateway.
package access

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// Codes of proxy access and console sessions (gateway/codes.go lists them with the rest).
const (
	CodeAccessDenied = "ACCESS::DENIED"
	CodeLinkInvalid  = "ACCESS::LINK_INVALID"
	CodeLinkExpired  = "ACCESS::LINK_EXPIRED"
	// CodeAccessRevoked answers a key-bound access header whose key is gone.
	CodeAccessRevoked = "ACCESS::TOKEN_REVOKED"
	// CodeSessionInvalid answers a console session that is not (or no longer) valid.
	CodeSessionInvalid = "SESSION::INVALID"
	// CodeCSRFTokenInvalid: a change made with a session cookie lacks its X-CSRF-Token.
	CodeCSRFTokenInvalid = "CSRF_TOKEN_INVALID"
)

// Extensions the access and TTL rules understand.
const (
	ExtensionPublic      = "access.public"
	ExtensionRenewExtend = "access.renew.extend.seconds"
)

// Config is what the Manager needs of the gateway's configuration.
type Config struct {
	// MaxTimeout caps the expiry renew-on-access may give (now + MaxTimeout).
	MaxTimeout time.Duration
	// RenewCooldown is the least time between two renewals-on-access of one sandbox,
	// across every gateway.
	RenewCooldown time.Duration
}

// Manager owns this gateway's part of access: the link keys it holds, the keys' hashes
// it checks access values against, the activity it has not written yet and the renewals
// under way. It is safe for concurrent use.
type Manager struct {
	cfg     Config
	store   *store.Store
	policy  *policy.Engine
	metrics *metrics.Set
	host    Host
	log     *slog.Logger

	links linkKeys
	// keyBindings holds the last stored hash seen per key id and when it was read
	// (knownBinding, values.go): what access header checks use while it is fresh, and
	// their fallback while the store is unavailable.
	keyBindings sync.Map
	activity    activityState
	// ttlDecider, when set, takes renew-on-access decisions over (plugins).
	ttlDecider TTLDecider

	// group runs the renewals that accesses start.
	group spawn.Group
}

// New builds a Manager. pol decides proxied requests; it must not be nil.
func New(cfg Config, st *store.Store, pol *policy.Engine, m *metrics.Set, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{
		cfg: cfg, store: st, policy: pol, metrics: m, host: host, log: log,
		links:    linkKeys{keys: map[string][]byte{}},
		activity: activityState{last: map[string]time.Time{}, touches: map[string]time.Time{}},
	}
}

// Stop waits for the renewals under way and starts no more.
func (m *Manager) Stop() { m.group.Stop() }

// withTimeout is the context of work that outlives the request that started it.
func withTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
