package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/publicsuffix"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// Credential kinds a proxied request can carry (the access policy's principal.kind).
const (
	CredAPIKey       = "api_key"
	CredSandboxToken = "sandbox_token"
	CredSignedLink   = "signed_link"
	CredCookie       = "cookie"
	CredAnonymous    = "anonymous"
)

// Extensions the access and TTL rules understand.
const (
	ExtensionPublic      = "access.public"
	ExtensionRenewExtend = "access.renew.extend.seconds"
)

// Codes of proxy denials.
const (
	CodeAccessDenied = "ACCESS::DENIED"
	CodeLinkInvalid  = "ACCESS::LINK_INVALID"
	CodeLinkExpired  = "ACCESS::LINK_EXPIRED"
)

// ProxyAccess describes one proxied request for the access decision.
type ProxyAccess struct {
	Kind string
	// Caller is set for an API key.
	Caller *Caller
	// Sandbox and Port are what a token, link or cookie is bound to.
	Sandbox string
	Port    int
	Method  string
	Path    string
}

// AuthorizeProxy asks the Rego access policy whether the request may reach port of sb.
// Another tenant's key gets the same 404 as a sandbox that does not exist.
func (s *Service) AuthorizeProxy(ctx context.Context, sb *store.Sandbox, port int, a ProxyAccess) error {
	in := policy.AccessInput{
		Action:   "sandbox.proxy",
		Tenant:   sb.Tenant,
		Resource: policy.Resource{Kind: "sandbox", ID: sb.ID, Tenant: sb.Tenant, Public: sb.Extensions[ExtensionPublic] == "true" && !platformPort(port), Port: port},
		Request:  policy.Request{Method: a.Method, Path: a.Path},
	}
	in.Principal = policy.Principal{Kind: a.Kind, Sandbox: a.Sandbox, Port: a.Port}
	if a.Caller != nil {
		in.Principal.ID = a.Caller.KeyID
		in.Principal.Tenant = a.Caller.Tenant
		in.Principal.Role = a.Caller.Role()
	}
	d := s.policy.Access(ctx, in)
	if d.Allow {
		return nil
	}
	s.log.Info("proxy access denied", "sandbox", sb.ID, "port", port, "credential", a.Kind, "decision", d)
	switch {
	case a.Kind == CredAnonymous:
		return Errorf(http.StatusUnauthorized, CodeMissingAPIKey, "this sandbox port needs a credential: an API key, the sandbox's access header, or a signed link")
	case d.HTTPStatus() == http.StatusNotFound:
		return notFound(sb.ID)
	}
	return Errorf(http.StatusForbidden, CodeAccessDenied, "%s", d.Message)
}

// Role is the policy role of a caller's key.
func (c Caller) Role() string {
	if c.Admin {
		return "admin"
	}
	if c.KeyRole != "" {
		return c.KeyRole
	}
	return "member"
}

// ---- signed links ----------------------------------------------------------------

// previewState holds link keys and access bookkeeping.
type previewState struct {
	mu       sync.RWMutex
	keys     map[string][]byte // kid → secret
	current  string
	loadedAt time.Time

	activityMu   sync.Mutex
	lastActivity map[string]time.Time

	events  chan store.Event
	dropped atomic.Int64
}

func newPreviewState() previewState {
	return previewState{keys: map[string][]byte{}, lastActivity: map[string]time.Time{}, events: make(chan store.Event, 8192)}
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
		return "", Errorf(http.StatusForbidden, CodeForbidden, "only the platform admin rotates signing keys")
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

func linkMAC(key []byte, purpose, sandbox string, port int, exp int64) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s|%s|%d|%d", purpose, sandbox, port, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signToken makes "kid.exp.mac", bound to purpose, sandbox, port and expiry.
func (s *Service) signToken(ctx context.Context, purpose, sandbox string, port int, exp time.Time) (string, error) {
	keys, cur, err := s.linkKeys(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s.%d.%s", cur, exp.Unix(), linkMAC(keys[cur], purpose, sandbox, port, exp.Unix())), nil
}

// verifyToken checks a token made by signToken and returns its expiry.
func (s *Service) verifyToken(ctx context.Context, purpose, token, sandbox string, port int) (time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, Errorf(http.StatusUnauthorized, CodeLinkInvalid, "the link token is malformed")
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return time.Time{}, Errorf(http.StatusUnauthorized, CodeLinkInvalid, "the link token is malformed")
	}
	keys, _, err := s.linkKeys(ctx)
	if err != nil {
		return time.Time{}, err
	}
	key, ok := keys[parts[0]]
	if !ok || !hmac.Equal([]byte(parts[2]), []byte(linkMAC(key, purpose, sandbox, port, exp))) {
		return time.Time{}, Errorf(http.StatusUnauthorized, CodeLinkInvalid, "the link is not valid for this sandbox and port (or its signing key was rotated out)")
	}
	expires := time.Unix(exp, 0)
	if time.Now().After(expires) {
		return time.Time{}, Errorf(http.StatusUnauthorized, CodeLinkExpired, "the link expired at %s", expires.UTC().Format(time.RFC3339))
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

// ---- activity, renew-on-access and access events -----------------------------------

// AccessRecord is what the proxy reports about one request it forwarded.
type AccessRecord struct {
	Port       int
	Method     string
	Path       string
	Status     int
	Bytes      int64
	Duration   time.Duration
	Credential string
}

// RecordAgentCall notes, for the audit stream and plugins, a call that starts work in a
// sandbox: a command, a code cell or a file upload through the agent API.
func (s *Service) RecordAgentCall(sb *store.Sandbox, typ string, data map[string]any) {
	ev := store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Data: data}
	s.queueEvent(ev)
}

// queueEvent hands ev to the batched event writer without blocking; when the queue is
// full the event is dropped and counted. The writer drains the queue into its backlog
// while Redis is away (runAccessLog), so an outage alone does not fill it.
func (s *Service) queueEvent(ev store.Event) {
	select {
	case s.preview.events <- ev:
	default:
		s.preview.dropped.Add(1)
	}
}

// activityThrottle is the least time between two activity updates of one sandbox.
const activityThrottle = time.Second

// RecordAccess notes a proxied request: it queues the access event (written in batches,
// off the request path) and, at most once per activityThrottle, records activity, which
// may extend the sandbox's life.
func (s *Service) RecordAccess(sb *store.Sandbox, rec AccessRecord) {
	ev := store.Event{Type: "preview.accessed", Tenant: sb.Tenant, SandboxID: sb.ID, Time: time.Now().UTC(), Data: map[string]any{
		"port": rec.Port, "method": rec.Method, "path": rec.Path, "status": rec.Status, "bytes": rec.Bytes,
		"durationMs": float64(rec.Duration.Microseconds()) / 1000, "credential": rec.Credential,
	}}
	s.queueEvent(ev)
	now := time.Now()
	s.preview.activityMu.Lock()
	last := s.preview.lastActivity[sb.ID]
	due := now.Sub(last) >= activityThrottle
	if due {
		if len(s.preview.lastActivity) > 100000 {
			s.preview.lastActivity = map[string]time.Time{}
		}
		s.preview.lastActivity[sb.ID] = now
	}
	s.preview.activityMu.Unlock()
	if due {
		go s.onActivity(sb, rec)
	}
}

// accessBacklogMax bounds the events kept in memory while Redis cannot take them (about
// 300 bytes each); beyond it the oldest are dropped and counted.
const accessBacklogMax = 50000

// runAccessLog writes queued access and agent-call events to Redis in pipelined batches.
// While Redis is unreachable they are kept (up to accessBacklogMax, oldest dropped first)
// and written once it answers again, in their order; live subscribers (plugins, event
// streams of this gateway) get each event once, when it is first taken from the queue.
// A batch that failed half-way is written again whole, so an event may be stored twice
// after an outage, never lost while the backlog has room.
func (s *Service) runAccessLog() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var backlog []store.Event
		fresh := make([]store.Event, 0, 256)
		lost := int64(0)
		flush := func() {
			if len(fresh) > 0 {
				s.publishEvents(fresh)
				backlog = append(backlog, fresh...)
				fresh = fresh[:0]
			}
			if over := len(backlog) - accessBacklogMax; over > 0 {
				backlog = append(backlog[:0:0], backlog[over:]...)
				s.preview.dropped.Add(int64(over))
				lost += int64(over)
			}
			for len(backlog) > 0 {
				n := min(len(backlog), 512)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := s.store.AppendEvents(ctx, backlog[:n])
				cancel()
				if err != nil {
					if !errors.Is(err, store.ErrUnavailable) {
						s.log.Warn("access events lost", "count", n, "err", err)
						backlog = backlog[n:]
						continue
					}
					if !errors.Is(err, store.ErrFailFast) {
						s.log.Debug("redis unreachable: access events kept for later", "pending", len(backlog))
					}
					return
				}
				backlog = backlog[n:]
			}
			backlog = nil // release a backlog grown during an outage
			if lost > 0 {
				s.log.Warn("access events dropped while redis was unreachable (backlog full)", "count", lost)
				lost = 0
			}
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case ev := <-s.preview.events:
				fresh = append(fresh, ev)
				if len(fresh) == cap(fresh) {
					flush()
				}
			case <-t.C:
				flush()
			case <-s.stop:
				for len(s.preview.events) > 0 {
					fresh = append(fresh, <-s.preview.events)
				}
				flush()
				if len(backlog) > 0 {
					s.log.Warn("access events lost at shutdown: redis unreachable", "count", len(backlog))
				}
				return
			}
		}
	}()
}

func (s *Service) onActivity(sb *store.Sandbox, rec AccessRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.store.TouchActivity(ctx, sb.ID, time.Now())
	if sb.Extensions[ExtensionRenewExtend] == "" || sb.ExpiresAt == nil {
		return
	}
	// One renewal per cooldown across every gateway.
	if ok, err := s.store.TryCooldown(ctx, "renew:"+sb.ID, s.cfg.RenewCooldown); err != nil || !ok {
		return
	}
	cur, err := s.store.GetSandbox(ctx, sb.ID)
	if err != nil || cur.ExpiresAt == nil {
		return
	}
	exp, changed := s.decideTTL(ctx, cur, TTLActivity{Port: rec.Port, Method: rec.Method, Path: rec.Path})
	if !changed {
		return
	}
	_, err = s.store.ModifySandbox(ctx, sb.ID, func(x *store.Sandbox) error {
		if x.ExpiresAt == nil || !exp.After(*x.ExpiresAt) {
			return errNoChange
		}
		x.ExpiresAt = &exp
		return nil
	})
	if err == nil {
		s.log.Debug("renewed on access", "sandbox", sb.ID, "expiresAt", exp)
		s.emit(ctx, sb, "sandbox.renewed", map[string]any{"expiresAt": exp, "reason": "activity"})
	}
}

var errNoChange = errors.New("no change")

// TTLActivity is what triggered a TTL decision: an access to a port, or (Renew) an
// explicit renew-expiration asking for Requested.
type TTLActivity struct {
	Port      int
	Method    string
	Path      string
	Renew     bool
	Requested time.Time
}

// TTLDecider decides a sandbox's new expiry on activity; ok false means no change. A
// plugin host can take the decision over; any failure falls back to the built-in rule.
type TTLDecider func(ctx context.Context, sb *store.Sandbox, activity TTLActivity, builtin time.Time, max time.Time) (time.Time, bool, error)

// SetTTLDecider installs the function that overrides the built-in renew-on-access rule.
func (s *Service) SetTTLDecider(d TTLDecider) { s.ttlDecider = d }

// decideTTL is the one place where renew-on-access is decided: the built-in rule moves
// the expiry to max(now + extend, current), capped by MaxTimeout; a TTLDecider may say
// otherwise.
func (s *Service) decideTTL(ctx context.Context, sb *store.Sandbox, act TTLActivity) (time.Time, bool) {
	extend, err := strconv.Atoi(sb.Extensions[ExtensionRenewExtend])
	if err != nil || extend <= 0 || sb.ExpiresAt == nil {
		return time.Time{}, false
	}
	now := time.Now().UTC()
	maxExp := now.Add(s.cfg.MaxTimeout)
	builtin := now.Add(time.Duration(extend) * time.Second)
	if builtin.Before(*sb.ExpiresAt) {
		builtin = *sb.ExpiresAt
	}
	if builtin.After(maxExp) {
		builtin = maxExp
	}
	if s.ttlDecider != nil {
		exp, ok, err := s.ttlDecider(ctx, sb, act, builtin, maxExp)
		if err == nil {
			if !ok {
				return time.Time{}, false
			}
			if exp.After(maxExp) {
				exp = maxExp
			}
			return exp, exp.After(*sb.ExpiresAt)
		}
		s.log.Warn("TTL plugin failed; using the built-in rule", "sandbox", sb.ID, "err", err)
	}
	return builtin, builtin.After(*sb.ExpiresAt)
}

// CheckPreviewDomain refuses a preview domain that would put previews in the same site
// as the console: equal to, above or below the host of the public URL or address, or
// sharing its registrable domain (eTLD+1). Previews by host must live on a registrable
// domain of their own, so that no preview is same-site with the console (SameSite
// cookies would travel) and a preview cannot set cookies for the console's domain.
func CheckPreviewDomain(previewDomain, publicURL, publicAddress string) error {
	domain := strings.ToLower(strings.TrimSuffix(previewDomain, "."))
	if domain == "" {
		return nil
	}
	if strings.ContainsAny(domain, "/:@ ") || strings.HasPrefix(domain, ".") || net.ParseIP(domain) != nil {
		return fmt.Errorf("preview domain %q: want a DNS name such as previews.example", previewDomain)
	}
	var hosts []string
	if u, err := url.Parse(publicURL); publicURL != "" && err == nil {
		hosts = append(hosts, u.Hostname())
	}
	if publicAddress != "" {
		h := publicAddress
		if hh, _, err := net.SplitHostPort(publicAddress); err == nil {
			h = hh
		}
		hosts = append(hosts, h)
	}
	for _, host := range hosts {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		if host == "" || net.ParseIP(host) != nil {
			continue // an address shares no cookies or site with a name
		}
		if host == domain || strings.HasSuffix(host, "."+domain) || strings.HasSuffix(domain, "."+host) {
			return fmt.Errorf("preview domain %q and the gateway's host %q are one site: previews must live on a registrable domain of their own", previewDomain, host)
		}
		a, errA := publicsuffix.EffectiveTLDPlusOne(host)
		b, errB := publicsuffix.EffectiveTLDPlusOne(domain)
		if errA == nil && errB == nil && a == b {
			return fmt.Errorf("preview domain %q shares the registrable domain %q with the gateway's host %q: previews must live on a registrable domain of their own", previewDomain, a, host)
		}
	}
	return nil
}
