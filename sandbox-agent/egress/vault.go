package egress

// The credential vault: credentials (write-only secret values) and bindings (which
// requests get which credential as which header), with the OpenSandbox wire shapes of
// egress-api.yaml. This file is the model: decoding, validation, revisions, the
// sanitized view and request matching. vaultapi.go serves it, vaultproxy.go injects it.

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultproto"
	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

// Stable error codes of the credential vault API.
const (
	CodeVaultInvalid       = "VAULT::INVALID_REQUEST"
	CodeVaultUnknownAuth   = "VAULT::UNKNOWN_AUTH_TYPE"
	CodeVaultUnknownCred   = "VAULT::UNKNOWN_CREDENTIAL"
	CodeVaultOverlap       = "VAULT::OVERLAPPING_BINDINGS"
	CodeVaultHeaderName    = "VAULT::INVALID_HEADER_NAME"
	CodeVaultValue         = "VAULT::INVALID_VALUE"
	CodeVaultMatch         = "VAULT::INVALID_MATCH"
	CodeVaultDuplicate     = "VAULT::DUPLICATE_NAME"
	CodeVaultNotFound      = "VAULT::NOT_FOUND"
	CodeVaultExists        = "VAULT::ALREADY_EXISTS"
	CodeVaultStale         = "VAULT::REVISION_CONFLICT"
	CodeVaultNotEnabled    = "VAULT::PROXY_NOT_ENABLED"
	CodeVaultAmbiguous     = "VAULT::AMBIGUOUS_BINDING"
	CodeVaultAmbiguousPath = "VAULT::AMBIGUOUS_PATH"
	CodeVaultHostMismatch  = "VAULT::HOST_MISMATCH"
	CodeVaultUpstreamError = "VAULT::UPSTREAM_UNAVAILABLE"
)

// Bounds of one vault.
const (
	maxVaultCredentials = 64
	maxVaultBindings    = 64
	maxCredentialValue  = 8 << 10
	maxVaultName        = 128
)

// VaultError is a refused vault request; its message never holds a secret value.
type VaultError struct {
	Status  int
	Code    string
	Message string
}

func (e *VaultError) Error() string { return e.Message }

func vaultErrorf(status int, code, format string, args ...any) *VaultError {
	return &VaultError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badVault(code, format string, args ...any) *VaultError {
	return vaultErrorf(http.StatusBadRequest, code, format, args...)
}

// The vault's wire shapes, declared once in vaultproto for the enforcer and the SDK.
type (
	Credential       = vaultproto.Credential
	CredentialSource = vaultproto.CredentialSource
	Binding          = vaultproto.Binding
	BindingMatch     = vaultproto.BindingMatch
	BindingAuth      = vaultproto.BindingAuth
	HeaderSource     = vaultproto.HeaderSource
)

// Auth types.
const (
	AuthBearer        = vaultproto.AuthBearer
	AuthBasic         = vaultproto.AuthBasic
	AuthAPIKey        = vaultproto.AuthAPIKey
	AuthCustomHeaders = vaultproto.AuthCustomHeaders
)

// storedCredential is a credential as the vault keeps it (and the state file).
type storedCredential struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Revision int64  `json:"revision"`
}

type storedBinding struct {
	Binding
	Revision int64 `json:"revision"`
}

// vaultState is the whole vault; it is immutable once built (changes make a new one).
type vaultState struct {
	Revision    int64              `json:"revision"`
	Credentials []storedCredential `json:"credentials"`
	Bindings    []storedBinding    `json:"bindings"`
}

// The sanitized state (no value ever) and the request bodies, as vaultproto declares them.
type (
	VaultView         = vaultproto.State
	CredentialView    = vaultproto.CredentialMetadata
	BindingView       = vaultproto.BindingMetadata
	AuthView          = vaultproto.AuthMetadata
	VaultCreate       = vaultproto.Create
	VaultMutation     = vaultproto.Patch
	CredentialChanges = vaultproto.CredentialChanges
	BindingChanges    = vaultproto.BindingChanges
)

// decodeVaultJSON decodes strictly; the error never quotes the body (it may hold a
// secret), only the decoder's position-free reason.
func decodeVaultJSON(body []byte, v any) *VaultError {
	if err := strictjson.Decode(body, v); err != nil {
		return badVault(CodeVaultInvalid, "request body is not a valid vault document: %s", strictjson.Reason(err))
	}
	return nil
}

// decodeVaultCreate reads the body of POST /credential-vault: credentials and bindings
// must both be given.
func decodeVaultCreate(body []byte) (VaultCreate, *VaultError) {
	var req VaultCreate
	if verr := decodeVaultJSON(body, &req); verr != nil {
		return req, verr
	}
	if req.Credentials == nil || req.Bindings == nil {
		return req, badVault(CodeVaultInvalid, "credentials and bindings are both required (either may be an empty list, or null)")
	}
	return req, nil
}

// validVaultName: names appear in URL paths and audit records.
func validVaultName(kind, name string) *VaultError {
	if name == "" || len(name) > maxVaultName {
		return badVault(CodeVaultInvalid, "%s name must be 1 to %d characters", kind, maxVaultName)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return badVault(CodeVaultInvalid, "%s name %q may hold only letters, digits, '-', '_' and '.'", kind, name)
		}
	}
	return nil
}

// normalizeCredential checks a credential and returns it as stored (revision unset).
func normalizeCredential(c Credential) (storedCredential, *VaultError) {
	if err := validVaultName("credential", c.Name); err != nil {
		return storedCredential{}, err
	}
	if c.Source.Type != "" && c.Source.Type != "inline" {
		return storedCredential{}, badVault(CodeVaultInvalid, "credential %q: source.type must be \"inline\"", c.Name)
	}
	v := c.Source.Value
	if v == "" || len(v) > maxCredentialValue {
		return storedCredential{}, badVault(CodeVaultValue, "credential %q: source.value must be 1 to %d bytes", c.Name, maxCredentialValue)
	}
	for i := 0; i < len(v); i++ {
		// A CR or LF would split the header it goes into (request smuggling); other
		// control bytes are refused by servers anyway.
		if b := v[i]; b < 0x20 && b != '\t' || b == 0x7f {
			return storedCredential{}, badVault(CodeVaultValue, "credential %q: source.value holds a control character (CR, LF, NUL...), which cannot go into a header", c.Name)
		}
	}
	return storedCredential{Name: c.Name, Value: v}, nil
}

// headerToken reports whether s is an RFC 9110 token.
func headerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// reservedHeaders cannot be injected: they frame or route the request.
var reservedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te", "Trailer", "Keep-Alive", "Proxy-Connection"}

func checkHeaderName(binding, name string) *VaultError {
	if !headerToken(name) {
		return badVault(CodeVaultHeaderName, "binding %q: header name %q is not an HTTP token", binding, name)
	}
	if slices.Contains(reservedHeaders, http.CanonicalHeaderKey(name)) {
		return badVault(CodeVaultHeaderName, "binding %q: header %s frames the request and cannot carry a credential", binding, name)
	}
	return nil
}

var defaultMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// normalizeBinding checks a binding on its own and fills the match defaults.
func normalizeBinding(b Binding) (Binding, *VaultError) {
	if err := validVaultName("binding", b.Name); err != nil {
		return Binding{}, err
	}
	m := b.Match
	out := Binding{Name: b.Name}
	if len(m.Schemes) == 0 {
		m.Schemes = []string{"https"}
	}
	for _, s := range m.Schemes {
		s = strings.ToLower(s)
		if s != "https" && s != "http" {
			return Binding{}, badVault(CodeVaultMatch, "binding %q: scheme %q must be https or http", b.Name, s)
		}
		if !slices.Contains(out.Match.Schemes, s) {
			out.Match.Schemes = append(out.Match.Schemes, s)
		}
	}
	if len(m.Ports) == 0 {
		for _, s := range out.Match.Schemes {
			m.Ports = append(m.Ports, map[string]int{"https": 443, "http": 80}[s])
		}
	}
	for _, p := range m.Ports {
		if p < 1 || p > 65535 {
			return Binding{}, badVault(CodeVaultMatch, "binding %q: port %d is not 1 to 65535", b.Name, p)
		}
		if !slices.Contains(out.Match.Ports, p) {
			out.Match.Ports = append(out.Match.Ports, p)
		}
	}
	if len(m.Hosts) == 0 {
		return Binding{}, badVault(CodeVaultMatch, "binding %q: match.hosts needs at least one host", b.Name)
	}
	for _, h := range m.Hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		name := strings.TrimPrefix(h, "*.")
		if _, err := netip.ParseAddr(name); err == nil {
			return Binding{}, badVault(CodeVaultMatch, "binding %q: host %q is an IP address; bindings name hosts (the vault intercepts by DNS name)", b.Name, h)
		}
		if strings.Contains(name, "*") || validateName(name) != nil {
			return Binding{}, badVault(CodeVaultMatch, "binding %q: host %q is not a host name or a \"*.\" wildcard", b.Name, h)
		}
		if !slices.Contains(out.Match.Hosts, h) {
			out.Match.Hosts = append(out.Match.Hosts, h)
		}
	}
	if len(m.Methods) == 0 {
		m.Methods = defaultMethods
	}
	for _, meth := range m.Methods {
		meth = strings.ToUpper(meth)
		if !headerToken(meth) {
			return Binding{}, badVault(CodeVaultMatch, "binding %q: method %q is not an HTTP method", b.Name, meth)
		}
		if !slices.Contains(out.Match.Methods, meth) {
			out.Match.Methods = append(out.Match.Methods, meth)
		}
	}
	if len(m.Paths) == 0 {
		m.Paths = []string{"/*"}
	}
	for _, p := range m.Paths {
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, " \t\r\n?#") {
			return Binding{}, badVault(CodeVaultMatch, "binding %q: path %q must start with / and hold no space, ? or #", b.Name, p)
		}
		if !slices.Contains(out.Match.Paths, p) {
			out.Match.Paths = append(out.Match.Paths, p)
		}
	}
	a := b.Auth
	switch a.Type {
	case AuthBearer, AuthBasic:
		if a.Credential == "" || a.Name != "" || len(a.Headers) > 0 {
			return Binding{}, badVault(CodeVaultInvalid, "binding %q: auth %s takes exactly {type, credential}", b.Name, a.Type)
		}
	case AuthAPIKey:
		if a.Credential == "" || len(a.Headers) > 0 {
			return Binding{}, badVault(CodeVaultInvalid, "binding %q: auth apiKey takes exactly {type, name, credential}", b.Name)
		}
		if err := checkHeaderName(b.Name, a.Name); err != nil {
			return Binding{}, err
		}
	case AuthCustomHeaders:
		if a.Credential != "" || a.Name != "" || len(a.Headers) == 0 {
			return Binding{}, badVault(CodeVaultInvalid, "binding %q: auth customHeaders takes exactly {type, headers: [{name, credential}]} with at least one header", b.Name)
		}
		seen := map[string]bool{}
		for _, h := range a.Headers {
			if err := checkHeaderName(b.Name, h.Name); err != nil {
				return Binding{}, err
			}
			if h.Credential == "" {
				return Binding{}, badVault(CodeVaultInvalid, "binding %q: header %s needs a credential", b.Name, h.Name)
			}
			if k := http.CanonicalHeaderKey(h.Name); seen[k] {
				return Binding{}, badVault(CodeVaultHeaderName, "binding %q: header %s is given twice", b.Name, h.Name)
			} else {
				seen[k] = true
			}
		}
	default:
		return Binding{}, badVault(CodeVaultUnknownAuth, "binding %q: auth.type %q is not one of bearer, basic, apiKey, customHeaders", b.Name, a.Type)
	}
	out.Auth = a
	return out, nil
}

// credentialNames lists the credentials a binding uses.
func credentialNames(b Binding) []string {
	if b.Auth.Type == AuthCustomHeaders {
		var out []string
		for _, h := range b.Auth.Headers {
			out = append(out, h.Credential)
		}
		return out
	}
	return []string{b.Auth.Credential}
}

// checkWhole validates what only the whole vault can tell: unique names, credentials
// that exist, no two bindings that could match one request.
func (v *vaultState) checkWhole() *VaultError {
	if len(v.Credentials) > maxVaultCredentials {
		return badVault(CodeVaultInvalid, "a vault holds at most %d credentials", maxVaultCredentials)
	}
	if len(v.Bindings) > maxVaultBindings {
		return badVault(CodeVaultInvalid, "a vault holds at most %d bindings", maxVaultBindings)
	}
	creds := map[string]bool{}
	for _, c := range v.Credentials {
		if creds[c.Name] {
			return badVault(CodeVaultDuplicate, "credential %q is given twice", c.Name)
		}
		creds[c.Name] = true
	}
	names := map[string]bool{}
	for i, b := range v.Bindings {
		if names[b.Name] {
			return badVault(CodeVaultDuplicate, "binding %q is given twice", b.Name)
		}
		names[b.Name] = true
		for _, c := range credentialNames(b.Binding) {
			if !creds[c] {
				return badVault(CodeVaultUnknownCred, "binding %q names credential %q, which the vault does not hold", b.Name, c)
			}
		}
		for _, o := range v.Bindings[:i] {
			if bindingsOverlap(o.Match, b.Match) {
				return badVault(CodeVaultOverlap, "bindings %q and %q can match the same request; narrow hosts, ports, methods or paths so that at most one matches", o.Name, b.Name)
			}
		}
	}
	return nil
}

func intersects[T comparable](a, b []T) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func bindingsOverlap(a, b BindingMatch) bool {
	if !intersects(a.Schemes, b.Schemes) || !intersects(a.Ports, b.Ports) || !intersects(a.Methods, b.Methods) {
		return false
	}
	hosts := false
	for _, x := range a.Hosts {
		for _, y := range b.Hosts {
			hosts = hosts || hostsOverlap(x, y)
		}
	}
	if !hosts {
		return false
	}
	for _, x := range a.Paths {
		for _, y := range b.Paths {
			if pathsOverlap(x, y) {
				return true
			}
		}
	}
	return false
}

func hostsOverlap(a, b string) bool {
	sa, wa := strings.CutPrefix(a, "*.")
	sb, wb := strings.CutPrefix(b, "*.")
	switch {
	case !wa && !wb:
		return a == b
	case wa && !wb:
		return hostMatches(a, b)
	case !wa && wb:
		return hostMatches(b, a)
	}
	return sa == sb || strings.HasSuffix(sa, "."+sb) || strings.HasSuffix(sb, "."+sa)
}

// pathsOverlap is conservative: two globs overlap unless their literal prefixes
// diverge, or both are literal and differ; "never guess" favours refusing a pair that
// a finer analysis might have allowed.
func pathsOverlap(a, b string) bool {
	ia, ib := strings.IndexByte(a, '*'), strings.IndexByte(b, '*')
	switch {
	case ia < 0 && ib < 0:
		return a == b
	case ia < 0:
		return globMatch(b, a)
	case ib < 0:
		return globMatch(a, b)
	}
	pa, pb := a[:ia], b[:ib]
	return strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa)
}

// hostMatches: exact, or "*.suffix" for any name strictly below suffix.
func hostMatches(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return pattern == host
}

// globMatch matches path against a pattern whose '*' stands for any run of
// characters, '/' included.
func globMatch(pattern, path string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == path
	}
	if !strings.HasPrefix(path, parts[0]) {
		return false
	}
	path = path[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(path, p)
		if i < 0 {
			return false
		}
		path = path[i+len(p):]
	}
	return strings.HasSuffix(path, last)
}

// view is the sanitized state.
func (v *vaultState) view() VaultView {
	out := VaultView{Revision: v.Revision, Credentials: []CredentialView{}, Bindings: []BindingView{}}
	for _, c := range v.Credentials {
		out.Credentials = append(out.Credentials, CredentialView{Name: c.Name, SourceType: "inline", Revision: c.Revision})
	}
	for _, b := range v.Bindings {
		out.Bindings = append(out.Bindings, b.view())
	}
	return out
}

func (b storedBinding) view() BindingView {
	av := AuthView{Type: b.Auth.Type}
	if b.Auth.Type == AuthAPIKey {
		av.Name = b.Auth.Name
	}
	return BindingView{Name: b.Name, Revision: b.Revision, Match: b.Match, Auth: av}
}

// newVault builds the first revision from a create request.
func newVault(req VaultCreate) (*vaultState, *VaultError) {
	v := &vaultState{Revision: 1, Credentials: []storedCredential{}, Bindings: []storedBinding{}}
	for _, c := range req.Credentials {
		sc, err := normalizeCredential(c)
		if err != nil {
			return nil, err
		}
		sc.Revision = 1
		v.Credentials = append(v.Credentials, sc)
	}
	for _, b := range req.Bindings {
		nb, err := normalizeBinding(b)
		if err != nil {
			return nil, err
		}
		v.Bindings = append(v.Bindings, storedBinding{Binding: nb, Revision: 1})
	}
	if err := v.checkWhole(); err != nil {
		return nil, err
	}
	return v, nil
}

// mutate returns the vault with m applied (deletes, then replaces, then adds), as one
// new revision; v itself is unchanged.
func (v *vaultState) mutate(m VaultMutation) (*vaultState, *VaultError) {
	if m.ExpectedRevision != nil && *m.ExpectedRevision != v.Revision {
		return nil, vaultErrorf(http.StatusConflict, CodeVaultStale, "expectedRevision %d is stale: the vault is at revision %d", *m.ExpectedRevision, v.Revision)
	}
	rev := v.Revision + 1
	next := &vaultState{Revision: rev, Credentials: slices.Clone(v.Credentials), Bindings: slices.Clone(v.Bindings)}
	if cc := m.Credentials; cc != nil {
		creds, err := applyChanges(next.Credentials, cc.Delete, cc.Replace, cc.Add, "credential",
			func(c storedCredential) string { return c.Name },
			func(c Credential) (storedCredential, *VaultError) {
				sc, err := normalizeCredential(c)
				sc.Revision = rev
				return sc, err
			})
		if err != nil {
			return nil, err
		}
		next.Credentials = creds
	}
	if bc := m.Bindings; bc != nil {
		bindings, err := applyChanges(next.Bindings, bc.Delete, bc.Replace, bc.Add, "binding",
			func(b storedBinding) string { return b.Name },
			func(b Binding) (storedBinding, *VaultError) {
				nb, err := normalizeBinding(b)
				return storedBinding{Binding: nb, Revision: rev}, err
			})
		if err != nil {
			return nil, err
		}
		next.Bindings = bindings
	}
	if err := next.checkWhole(); err != nil {
		return nil, err
	}
	return next, nil
}

// applyChanges applies one mutation set to a vault's credentials or bindings: deletes,
// then replaces, then adds, by name. what names the kind in errors; store checks an item
// of the request and turns it into a stored one.
func applyChanges[In, Stored any](items []Stored, del []string, replace, add []In, what string, name func(Stored) string, store func(In) (Stored, *VaultError)) ([]Stored, *VaultError) {
	index := func(n string) int { return slices.IndexFunc(items, func(s Stored) bool { return name(s) == n }) }
	for _, n := range del {
		i := index(n)
		if i < 0 {
			return nil, vaultErrorf(http.StatusNotFound, CodeVaultNotFound, "%s %q is not in the vault", what, n)
		}
		items = slices.Delete(items, i, i+1)
	}
	for _, in := range replace {
		s, err := store(in)
		if err != nil {
			return nil, err
		}
		i := index(name(s))
		if i < 0 {
			return nil, vaultErrorf(http.StatusNotFound, CodeVaultNotFound, "%s %q is not in the vault; add it instead", what, name(s))
		}
		items[i] = s
	}
	for _, in := range add {
		s, err := store(in)
		if err != nil {
			return nil, err
		}
		if index(name(s)) >= 0 {
			return nil, badVault(CodeVaultDuplicate, "%s %q is in the vault already; replace it instead", what, name(s))
		}
		items = append(items, s)
	}
	return items, nil
}

// restored checks a vault read back from the state file as strictly as a new one.
func (v *vaultState) restored() (*vaultState, error) {
	if v == nil {
		return nil, nil
	}
	for i, c := range v.Credentials {
		sc, err := normalizeCredential(Credential{Name: c.Name, Source: CredentialSource{Value: c.Value}})
		if err != nil {
			return nil, err
		}
		sc.Revision = c.Revision
		v.Credentials[i] = sc
	}
	for i, b := range v.Bindings {
		nb, err := normalizeBinding(b.Binding)
		if err != nil {
			return nil, err
		}
		v.Bindings[i] = storedBinding{Binding: nb, Revision: b.Revision}
	}
	if err := v.checkWhole(); err != nil {
		return nil, err
	}
	return v, nil
}

// vaultRequest is what a binding is matched against.
type vaultRequest struct {
	scheme, host, method, path string
	port                       int
}

// matchedBy reports whether a binding's match selects the request.
func (r vaultRequest) matchedBy(m BindingMatch) bool {
	if !slices.Contains(m.Schemes, r.scheme) || !slices.Contains(m.Ports, r.port) || !slices.Contains(m.Methods, r.method) {
		return false
	}
	if !slices.ContainsFunc(m.Hosts, func(h string) bool { return hostMatches(h, r.host) }) {
		return false
	}
	return slices.ContainsFunc(m.Paths, func(p string) bool { return globMatch(p, r.path) })
}

// namesAllButPath reports whether a binding's match selects the request on everything
// but its path: a request whose path is ambiguous (ambiguousPath) is refused then, since
// no one can tell which of the binding's paths the upstream will take it for.
func (r vaultRequest) namesAllButPath(m BindingMatch) bool {
	return slices.Contains(m.Schemes, r.scheme) && slices.Contains(m.Ports, r.port) && slices.Contains(m.Methods, r.method) &&
		slices.ContainsFunc(m.Hosts, func(h string) bool { return hostMatches(h, r.host) })
}

// namedAllButPath reports whether some binding selects r on everything but its path.
func (v *vaultState) namedAllButPath(r vaultRequest) bool {
	return v != nil && slices.ContainsFunc(v.Bindings, func(b storedBinding) bool { return r.namesAllButPath(b.Match) })
}

// ambiguousPath reports whether a request path may name another resource once the
// upstream normalises it (RFC 3986 dot-segment removal, percent-decoding, as nginx and
// most frameworks do) than the path bindings are matched against. escaped is the path
// as it goes on the wire, decoded its percent-decoding. Ambiguous are: a "." or ".."
// segment, also with a ";" parameter ("..;", which servlet containers read as ".."); a
// percent-encoded dot, slash or backslash, also encoded twice; and a backslash, which
// some servers take for a slash. Bindings match the path as sent, so such a path is
// refused rather than guessed at.
func ambiguousPath(escaped, decoded string) bool {
	lowerEscaped, lowerDecoded := strings.ToLower(escaped), strings.ToLower(decoded)
	for _, enc := range []string{"%2e", "%2f", "%5c"} {
		if strings.Contains(lowerEscaped, enc) || strings.Contains(lowerDecoded, enc) {
			return true
		}
	}
	if strings.ContainsRune(decoded, '\\') {
		return true
	}
	for _, seg := range strings.Split(decoded, "/") {
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// matching returns the bindings that match r.
func (v *vaultState) matching(r vaultRequest) []storedBinding {
	if v == nil {
		return nil
	}
	var out []storedBinding
	for _, b := range v.Bindings {
		if r.matchedBy(b.Match) {
			out = append(out, b)
		}
	}
	return out
}

// names reports whether some binding names host (any scheme, port or path), which is
// what decides interception.
func (v *vaultState) names(host string) bool {
	if v == nil {
		return false
	}
	for _, b := range v.Bindings {
		if slices.ContainsFunc(b.Match.Hosts, func(h string) bool { return hostMatches(h, host) }) {
			return true
		}
	}
	return false
}

// ports lists every port some binding names.
func (v *vaultState) ports() []uint16 {
	var out []uint16
	if v == nil {
		return nil
	}
	for _, b := range v.Bindings {
		for _, p := range b.Match.Ports {
			if !slices.Contains(out, uint16(p)) {
				out = append(out, uint16(p))
			}
		}
	}
	return out
}

// value returns the value of credential name.
func (v *vaultState) value(name string) string {
	for _, c := range v.Credentials {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// headers renders binding b's headers (name → value).
func (v *vaultState) headers(b storedBinding) [][2]string {
	switch b.Auth.Type {
	case AuthBearer:
		return [][2]string{{"Authorization", "Bearer " + v.value(b.Auth.Credential)}}
	case AuthBasic:
		return [][2]string{{"Authorization", "Basic " + v.value(b.Auth.Credential)}}
	case AuthAPIKey:
		return [][2]string{{b.Auth.Name, v.value(b.Auth.Credential)}}
	}
	var out [][2]string
	for _, h := range b.Auth.Headers {
		out = append(out, [2]string{h.Name, v.value(h.Credential)})
	}
	return out
}

// secrets lists every credential value, longest first, for redaction.
func (v *vaultState) secrets() []string {
	if v == nil {
		return nil
	}
	out := make([]string, 0, len(v.Credentials))
	for _, c := range v.Credentials {
		out = append(out, c.Value)
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}
