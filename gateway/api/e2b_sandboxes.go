package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
)

// The control API of the E2B door: E2B's request and answer shapes (its spec/openapi.yml)
// over the core's lifecycle calls.

// e2bEnvdVersion is the envd version the door reports. The SDKs turn features on by it
// (stdin, the default user, file metadata, recursive watches…): the agent's envd
// serves those of this version.
const e2bEnvdVersion = "0.6.4"

// e2bClientID stands for E2B's client (the node) id, which the SDKs read and ignore.
const e2bClientID = "sandgate"

// e2bDefaultTimeout is the lifetime of a sandbox created through the door without one,
// E2B's default, within the operator's bounds.
const e2bDefaultTimeout = 300 * time.Second

// e2bDefaultEntrypoint keeps a sandbox of an image template running: E2B's templates
// run no command of the caller's, only envd.
var e2bDefaultEntrypoint = []string{"tail", "-f", "/dev/null"}

// e2bExtTemplate is the extension in which the door records the template a create
// named (its alias, or a snapshot's id).
const e2bExtTemplate = "e2b.template"

// e2bNewSandbox is the body of POST /sandboxes and /v2/sandboxes. autoPause pauses the
// sandbox at its timeout instead of removing it (gateway.ExtensionPauseAtExpiry), with
// its memory (autoPauseMemory true, E2B's default; false is refused); autoResume resumes
// it on a call into it; volumeMounts mount the tenant's named volumes. What the door
// cannot honour is refused by name, never dropped: mcp, iam, secure false.
type e2bNewSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *e2bAutoResume    `json:"autoResume"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *e2bNetwork       `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        []e2bVolumeMount  `json:"volumeMounts"`
}

// e2bVolumeMount is E2B's SandboxVolumeMount: the tenant's named volume name mounted
// at path.
type e2bVolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// e2bAutoResume is E2B's autoResume of a create: a call into the sandbox while it is
// paused resumes it.
type e2bAutoResume struct {
	Enabled bool `json:"enabled"`
}

// e2bNetwork is E2B's network configuration of a create.
type e2bNetwork struct {
	AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
	AllowOut           []string `json:"allowOut"`
	DenyOut            []string `json:"denyOut"`
}

// e2bAllTraffic is E2B's name for every address in allowOut and denyOut.
const e2bAllTraffic = "0.0.0.0/0"

// e2bSandbox is E2B's Sandbox: the answer of a create, connect or resume.
type e2bSandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	// Domain is the preview domain, under which {port}-{sandboxID}.<domain> reaches the
	// sandbox (e2bHost); null without one, as E2B answers for its own domain.
	Domain *string `json:"domain"`
}

// e2bListedSandbox is E2B's ListedSandbox, an item of the list.
type e2bListedSandbox struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
	// snapshotID is the snapshot the sandbox was made from, for the list's template
	// filter (the template it answers is the name its create gave).
	snapshotID string
}

// e2bSandboxDetail is E2B's SandboxDetail, the answer of GET /sandboxes/{id}.
type e2bSandboxDetail struct {
	e2bListedSandbox
	EnvdAccessToken     string        `json:"envdAccessToken,omitempty"`
	Domain              *string       `json:"domain"`
	AllowInternetAccess *bool         `json:"allowInternetAccess,omitempty"`
	Lifecycle           *e2bLifecycle `json:"lifecycle,omitempty"`
}

// e2bLifecycle is E2B's SandboxLifecycle: what the sandbox's timeout does.
type e2bLifecycle struct {
	OnTimeout  string `json:"onTimeout"` // "kill" or "pause"
	AutoResume bool   `json:"autoResume"`
}

// E2B's two sandbox states.
const (
	e2bRunning = "running"
	e2bPaused  = "paused"
)

// e2bStateOf is E2B's state of a sandbox, false for one E2B would not report (failed,
// deleted, being deleted): the door answers 404 for it, as E2B does.
func e2bStateOf(state string) (string, bool) {
	switch state {
	case gateway.StateRunning, gateway.StatePending, gateway.StateResuming:
		return e2bRunning, true
	case gateway.StatePaused, gateway.StatePausing:
		return e2bPaused, true
	}
	return "", false
}

// e2bCreate is POST /sandboxes and /v2/sandboxes: the core's create (a cold start, or
// a claim when the template names a pool), answered 201 with the sandbox's tokens.
func (h *Handler) e2bCreate(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body e2bNewSandbox
	if err := decodeJSON(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	req, err := h.e2bCreateRequest(r.Context(), c, body)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	for _, m := range body.VolumeMounts {
		// A volume the caller has not is answered as such, before any sandbox starts.
		if _, err := h.svc.State().NamedVolume(r.Context(), c, m.Name); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	created, err := h.svc.Create(r.Context(), c, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	sb, err := h.svc.Lookup(r.Context(), c, created.ID)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.e2bSandboxOf(sb))
}

// e2bCreateRequest turns an E2B create into the core's: the template's image or pool
// (or caller's snapshot: by id, or by name, e2bSnapshotsNamed), E2B's default timeout,
// metadata, env and the egress rules of its network settings.
func (h *Handler) e2bCreateRequest(ctx context.Context, c gateway.Caller, body e2bNewSandbox) (gateway.CreateRequest, error) {
	var req gateway.CreateRequest
	alias := strings.TrimSpace(body.TemplateID)
	if alias == "" {
		return req, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "templateID is required")
	}
	if err := e2bRefuseUnserved(body); err != nil {
		return req, err
	}
	req.Extensions = map[string]string{e2bExtTemplate: alias}
	if body.AutoPause != nil && *body.AutoPause {
		req.Extensions[gateway.ExtensionPauseAtExpiry] = "true"
	}
	if body.AutoResume != nil && body.AutoResume.Enabled {
		req.Extensions[e2bExtAutoResume] = "true"
	}
	target, ok := h.e2b.templates[alias]
	snapshotID, isID := e2bSnapshotIDOf(alias)
	switch {
	case ok:
		if pool, isPool := strings.CutPrefix(target, e2bPoolPrefix); isPool {
			if len(body.VolumeMounts) > 0 {
				return req, gateway.Errorf(gateway.KindInvalid, gateway.CodeVolumeInvalid, "volumeMounts: template %q is a warm pool, whose sandboxes start before anyone claims them and cannot mount volumes", alias)
			}
			req.Extensions["poolRef"] = pool
		} else {
			req.Image = &gateway.ImageSpec{URI: target}
			req.Entrypoint = e2bDefaultEntrypoint
		}
	case isID:
		// A snapshot of the caller's is a template too; the core checks it is theirs.
		req.SnapshotID = snapshotID
	default:
		named, err := h.e2bSnapshotsNamed(ctx, c, alias, false)
		if err != nil {
			return req, err
		}
		if len(named) == 0 {
			return req, gateway.Errorf(gateway.KindNotFound, gateway.CodeImageNotFound, "template %q is not known to this gateway (known: %s, or the id or name of one of your snapshots)", alias, strings.Join(h.e2bTemplateNames(), ", "))
		}
		req.SnapshotID = named[0].ID
	}
	timeout, err := h.e2bTimeout(body.Timeout)
	if err != nil {
		return req, err
	}
	req.Timeout = &timeout
	req.Metadata = body.Metadata
	req.Env = body.EnvVars
	if body.Network != nil && body.Network.AllowPublicTraffic != nil && *body.Network.AllowPublicTraffic {
		// Public ports are the tenant-admin's decision (sandbox.publish), as on the
		// OpenSandbox door. Left out, a sandbox's ports need its traffic token.
		req.Extensions[access.ExtensionPublic] = "true"
	}
	if policy, ok := e2bEgressPolicy(body.AllowInternetAccess, body.Network); ok {
		js, _ := json.Marshal(policy)
		req.NetworkPolicy = js
	}
	vols, err := e2bVolumes(body.VolumeMounts)
	if err != nil {
		return req, err
	}
	req.Volumes = vols
	return req, nil
}

// e2bRefuseUnserved refuses, naming the field, what a create asks that the door cannot
// honour: an MCP gateway in the sandbox (mcp), workload identities (iam), a sandbox
// whose envd needs no token (secure false: sandgate always requires the sandbox's
// token), and a pause that drops the sandbox's memory (autoPauseMemory false: sandgate's
// pause freezes the sandbox and keeps it).
func e2bRefuseUnserved(body e2bNewSandbox) error {
	refuse := func(format string, args ...any) error {
		return gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, format, args...)
	}
	switch {
	case e2bRawSet(body.MCP):
		return refuse("mcp: this gateway serves no MCP gateway inside sandboxes; leave mcp out")
	case e2bRawSet(body.IAM):
		return refuse("iam: this gateway issues no workload identities to sandboxes; leave iam out")
	case body.Secure != nil && !*body.Secure:
		return refuse("secure: false asks for envd without an access token, and this gateway always requires the sandbox's token; leave secure out or set it true")
	case body.AutoPauseMemory != nil && !*body.AutoPauseMemory:
		return refuse("autoPauseMemory: false asks for a pause that drops the sandbox's memory, and this gateway's pause always keeps it; leave autoPauseMemory out or set it true")
	}
	return nil
}

// e2bRawSet reports whether a field read as raw JSON was given a value (not absent, not
// null).
func e2bRawSet(raw json.RawMessage) bool {
	v := strings.TrimSpace(string(raw))
	return v != "" && v != "null"
}

// e2bSystemRoots are directories of the sandbox that no volume may cover or sit inside:
// what the image's programs, the agent and the kernel need.
var e2bSystemRoots = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr", "/.sandgate"}

// e2bCoveredDirs are directories a volume may sit inside but not replace: the sandbox's
// root, the users' homes, temporary files and variable data.
var e2bCoveredDirs = []string{"/", "/home", "/home/user", "/root", "/tmp", "/var"}

// e2bVolumes are the create's volumes (OpenSandbox's volumes[].pvc, which the core
// namespaces per tenant and admission judges) of E2B's volumeMounts: each an existing
// named volume of the caller's (createIfNotExists false), at a path checked here so that
// the refusal names E2B's fields.
func e2bVolumes(mounts []e2bVolumeMount) (json.RawMessage, error) {
	if len(mounts) == 0 {
		return nil, nil
	}
	refuse := func(format string, args ...any) error {
		return gateway.Errorf(gateway.KindInvalid, gateway.CodeVolumeInvalid, format, args...)
	}
	if len(mounts) > gateway.MaxVolumes {
		return nil, refuse("volumeMounts: %d given; at most %d are allowed", len(mounts), gateway.MaxVolumes)
	}
	create := false
	paths := map[string]bool{}
	vols := make([]gateway.VolumeRequest, 0, len(mounts))
	for i, m := range mounts {
		if !gateway.IsClaimName(m.Name) {
			return nil, refuse("volumeMounts[%d].name %q: want a volume's name (1-63 lowercase letters, digits and '-', starting and ending with a letter or digit)", i, m.Name)
		}
		p, err := e2bMountPath(m.Path)
		if err != nil {
			return nil, refuse("volumeMounts[%d].path %q: %v", i, m.Path, err)
		}
		if paths[p] {
			return nil, refuse("volumeMounts[%d].path %q: two volumes mount there", i, m.Path)
		}
		paths[p] = true
		vols = append(vols, gateway.VolumeRequest{Name: "e2b-" + strconv.Itoa(i), MountPath: p,
			PVC: &gateway.PVCVolume{ClaimName: m.Name, CreateIfNotExists: &create}})
	}
	js, err := json.Marshal(vols)
	if err != nil {
		return nil, err
	}
	return js, nil
}

// e2bMountPath checks where a volume mounts: an absolute path without "." or ".."
// segments, outside the system's directories; it returns the path without a trailing
// slash.
func e2bMountPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00:") {
		return "", errors.New("want an absolute path inside the sandbox")
	}
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "." || seg == ".." {
			return "", errors.New(`"." and ".." are not allowed`)
		}
	}
	clean := path.Clean(p)
	for _, root := range e2bSystemRoots {
		if clean == root || strings.HasPrefix(clean, root+"/") {
			return "", fmt.Errorf("%s is the system's (the image's programs, the agent and the kernel need it)", root)
		}
	}
	if slices.Contains(e2bCoveredDirs, clean) {
		return "", fmt.Errorf("a volume cannot replace %s; mount it in a directory below", clean)
	}
	return clean, nil
}

// e2bTimeout is the lifetime in seconds of a create through the door: the one asked
// for, else E2B's default brought within the operator's bounds (an explicit one out of
// them is refused by the core, as on the OpenSandbox door).
func (h *Handler) e2bTimeout(asked *int64) (int64, error) {
	if asked != nil {
		if *asked < 0 {
			return 0, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidExpiration, "timeout %d: want seconds, not negative", *asked)
		}
		return *asked, nil
	}
	cfg := h.svc.Config()
	d := min(max(e2bDefaultTimeout, cfg.MinTimeout), cfg.MaxTimeout)
	return int64(d / time.Second), nil
}

// e2bEgressPolicy is the egress policy (OpenSandbox's networkPolicy, judged by the
// Rego egress policy like any other) of E2B's network settings, false when they ask
// for nothing and the operator's default applies. allowOut wins over denyOut, as in
// E2B; denyOut 0.0.0.0/0 or allow_internet_access false make the default deny.
func e2bEgressPolicy(internet *bool, n *e2bNetwork) (map[string]any, bool) {
	deny := internet != nil && !*internet
	rules := []map[string]string{}
	if n != nil {
		for _, t := range n.AllowOut {
			rules = append(rules, map[string]string{"action": "allow", "target": t})
		}
		for _, t := range n.DenyOut {
			if t == e2bAllTraffic {
				deny = true
				continue
			}
			rules = append(rules, map[string]string{"action": "deny", "target": t})
		}
	}
	if !deny && len(rules) == 0 {
		return nil, false
	}
	action := "allow"
	if deny {
		action = "deny"
	}
	return map[string]any{"defaultAction": action, "egress": rules}, true
}

// e2bTemplateNames lists the door's template aliases, sorted, for a refusal's message.
func (h *Handler) e2bTemplateNames() []string {
	names := make([]string, 0, len(h.e2b.templates))
	for alias := range h.e2b.templates {
		names = append(names, alias)
	}
	slices.Sort(names)
	return names
}

// e2bSource is what the door reads of a sandbox to describe it, from its record or
// from the core's view of it in a list.
type e2bSource struct {
	id, image, snapshotID, state string
	extensions, limits, metadata map[string]string
	created                      time.Time
	expires                      *time.Time
}

func e2bSourceOfRecord(sb *gateway.SandboxRecord, state string) e2bSource {
	return e2bSource{id: sb.ID, image: sb.Image, snapshotID: sb.SnapshotID, state: state, extensions: sb.Extensions,
		limits: sb.ResourceLimits, metadata: sb.Metadata, created: sb.CreatedAt, expires: sb.ExpiresAt}
}

// e2bTemplateOf is the template a sandbox was made from: the alias (or snapshot id) the
// door recorded, else the snapshot it was made from, else the alias of its image, else
// the image itself (a sandbox of the OpenSandbox door). A get and a list answer alike.
func (h *Handler) e2bTemplateOf(src e2bSource) string {
	if alias := src.extensions[e2bExtTemplate]; alias != "" {
		return alias
	}
	if src.snapshotID != "" {
		return src.snapshotID
	}
	for _, alias := range h.e2bTemplateNames() {
		if h.e2b.templates[alias] == src.image {
			return alias
		}
	}
	return src.image
}

// e2bSandboxOf is the Sandbox answer for sb. The traffic token is null for a sandbox
// whose ports are public, as in E2B.
func (h *Handler) e2bSandboxOf(sb *gateway.SandboxRecord) e2bSandbox {
	tmpl := h.e2bTemplateOf(e2bSourceOfRecord(sb, ""))
	out := e2bSandbox{TemplateID: tmpl, SandboxID: sb.ID, Alias: tmpl, ClientID: e2bClientID,
		EnvdVersion: e2bEnvdVersion, EnvdAccessToken: e2bToken(sb, e2bPurposeEnvd), Domain: h.e2bDomain()}
	if sb.Extensions[access.ExtensionPublic] != "true" {
		t := e2bToken(sb, e2bPurposeTraffic)
		out.TrafficAccessToken = &t
	}
	return out
}

// e2bDomain is the domain the door answers with a sandbox: the preview domain, nil
// without one.
func (h *Handler) e2bDomain() *string {
	if d := strings.TrimSuffix(h.svc.Config().PreviewDomain, "."); d != "" {
		return &d
	}
	return nil
}

// e2bListedOf is the list item of a sandbox.
func (h *Handler) e2bListedOf(src e2bSource) e2bListedSandbox {
	tmpl := h.e2bTemplateOf(src)
	end := farFuture
	if src.expires != nil {
		end = src.expires.UTC()
	}
	metadata := src.metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	out := e2bListedSandbox{TemplateID: tmpl, Alias: tmpl, SandboxID: src.id, ClientID: e2bClientID, StartedAt: src.created.UTC(),
		EndAt: end, State: src.state, EnvdVersion: e2bEnvdVersion, Metadata: metadata, snapshotID: src.snapshotID}
	limits := src.limits
	if v, ok := limits["cpu"]; ok {
		if m, err := gateway.ParseCPU(v); err == nil {
			out.CPUCount = int((m + 999) / 1000)
		}
	}
	if v, ok := limits["memory"]; ok {
		if b, err := gateway.ParseMemory(v); err == nil {
			out.MemoryMB = int(b >> 20)
		}
	}
	return out
}

// farFuture is the endAt of a sandbox without expiry (made by the OpenSandbox door
// without timeout): E2B's shape has no way to say "never".
var farFuture = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// e2bLookup is the record of a sandbox the caller may see and E2B would report.
func (h *Handler) e2bLookup(r *http.Request, c gateway.Caller) (*gateway.SandboxRecord, string, error) {
	id := r.PathValue("id")
	sb, err := h.svc.Lookup(r.Context(), c, id)
	if err != nil {
		return nil, "", err
	}
	state, ok := e2bStateOf(sb.State)
	if !ok {
		return nil, "", gateway.Errorf(gateway.KindNotFound, gateway.CodeNotFound, "sandbox %s not found (it is %s)", id, sb.State)
	}
	return sb, state, nil
}

// e2bGet is GET /sandboxes/{id}.
func (h *Handler) e2bGet(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	sb, state, err := h.e2bLookup(r, c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	d := e2bSandboxDetail{
		e2bListedSandbox: h.e2bListedOf(e2bSourceOfRecord(sb, state)),
		EnvdAccessToken:  e2bToken(sb, e2bPurposeEnvd),
		Domain:           h.e2bDomain(),
	}
	internet := e2bInternetAllowed(sb)
	d.AllowInternetAccess = &internet
	d.Lifecycle = &e2bLifecycle{OnTimeout: "kill", AutoResume: sb.Extensions[e2bExtAutoResume] == "true"}
	if sb.Extensions[gateway.ExtensionPauseAtExpiry] == "true" {
		d.Lifecycle.OnTimeout = "pause"
	}
	writeJSON(w, http.StatusOK, d)
}

// e2bDefaultLimit and e2bMaxLimit bound a page of the list, as E2B does.
const (
	e2bDefaultLimit = 100
	e2bMaxLimit     = 100
)

// e2bList is GET /v2/sandboxes: the caller's running and paused sandboxes (or those of
// the states asked for), filtered by metadata, template and start time, newest first
// (or oldest, with order=asc), limit at a time; the next page's token is in the
// x-next-token header.
func (h *Handler) e2bList(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q := r.URL.Query()
	lq, err := e2bListQuery(q)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	limit, err := intParam(q, "limit", e2bDefaultLimit, 1, e2bMaxLimit)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	offset := 0
	if tok := q.Get("nextToken"); tok != "" {
		if offset, err = strconv.Atoi(tok); err != nil || offset < 1 {
			h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "nextToken %q is not one this gateway gave", tok))
			return
		}
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "startedAfter %q is not an RFC 3339 time", v))
			return
		}
	}
	order := q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "order %q: want asc or desc", order))
		return
	}
	all, err := h.e2bListAllPages(r, c, lq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	items := h.e2bListed(all)
	tmpl := q.Get("template")
	// A template that names snapshots (by id or name) admits the sandboxes made from
	// them, whichever form of the name their create gave.
	fromSnapshot := map[string]bool{}
	if _, door := h.e2b.templates[tmpl]; tmpl != "" && !door {
		named, err := h.e2bSnapshotsNamed(r.Context(), c, tmpl, false)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		for _, v := range named {
			fromSnapshot[v.ID] = true
		}
	}
	items = slices.DeleteFunc(items, func(it e2bListedSandbox) bool {
		return (tmpl != "" && it.TemplateID != tmpl && !fromSnapshot[it.snapshotID]) || it.StartedAt.Before(after)
	})
	if order == "asc" {
		slices.Reverse(items)
	}
	if offset > len(items) {
		offset = len(items)
	}
	page := items[offset:min(offset+limit, len(items))]
	if offset+len(page) < len(items) {
		w.Header().Set("X-Next-Token", strconv.Itoa(offset+len(page)))
	}
	writeJSON(w, http.StatusOK, page)
}

// e2bListAll is GET /sandboxes, the list without pages of E2B's first API version:
// the caller's running sandboxes, filtered by metadata.
func (h *Handler) e2bListAll(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	lq, err := e2bListQuery(url.Values{"metadata": r.URL.Query()["metadata"], "state": {e2bRunning}})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	all, err := h.e2bListAllPages(r, c, lq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h.e2bListed(all))
}

// e2bListAllPages is every sandbox of the core's list that lq admits, newest first.
func (h *Handler) e2bListAllPages(r *http.Request, c gateway.Caller, lq gateway.ListQuery) ([]gateway.Sandbox, error) {
	var all []gateway.Sandbox
	for lq.Page = 1; ; lq.Page++ {
		page, err := h.svc.List(r.Context(), c, lq)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if !page.Pagination.HasNextPage {
			return all, nil
		}
	}
}

// e2bListQuery reads the list's filters: state (running, paused; comma-separated or
// repeated) and metadata (URL-encoded k=v&k2=v2, as the SDKs send it).
func e2bListQuery(q url.Values) (gateway.ListQuery, error) {
	lq := gateway.ListQuery{PageSize: 200}
	states := listParam(q["state"])
	if len(states) == 0 {
		states = []string{e2bRunning, e2bPaused}
	}
	for _, st := range states {
		switch strings.ToLower(st) {
		case e2bRunning:
			lq.States = append(lq.States, gateway.StateRunning, gateway.StatePending, gateway.StateResuming)
		case e2bPaused:
			lq.States = append(lq.States, gateway.StatePaused, gateway.StatePausing)
		default:
			return lq, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "state %q: want running or paused", st)
		}
	}
	if md := q.Get("metadata"); md != "" {
		parsed, err := url.ParseQuery(md)
		if err != nil {
			return lq, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "metadata filter %q: %v (want URL-encoded k=v&k2=v2)", md, err)
		}
		lq.Metadata = map[string]string{}
		for k, vs := range parsed {
			if k == "" {
				return lq, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "metadata filter %q: empty key", md)
			}
			lq.Metadata[k] = vs[len(vs)-1]
		}
	}
	return lq, nil
}

// e2bListed is the list items of sandboxes.
func (h *Handler) e2bListed(items []gateway.Sandbox) []e2bListedSandbox {
	out := make([]e2bListedSandbox, 0, len(items))
	for _, sb := range items {
		state, ok := e2bStateOf(sb.Status.State)
		if !ok {
			continue
		}
		out = append(out, h.e2bListedOf(e2bSource{id: sb.ID, image: sb.Image.URI, snapshotID: sb.SnapshotID, state: state,
			extensions: sb.Extensions, metadata: sb.Metadata, created: sb.CreatedAt, expires: sb.ExpiresAt}))
	}
	return out
}

// e2bDelete is DELETE /sandboxes/{id}.
func (h *Handler) e2bDelete(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.Delete(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bTimeoutBody is the body of POST /sandboxes/{id}/timeout.
type e2bTimeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

// e2bSetTimeout is POST /sandboxes/{id}/timeout: the sandbox now expires timeout
// seconds from now, which may be sooner than before (the core's renew, within the
// operator's bounds).
func (h *Handler) e2bSetTimeout(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body e2bTimeoutBody
	if err := decodeJSON(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	if body.Timeout == nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidExpiration, "timeout is required (seconds)"))
		return
	}
	if *body.Timeout <= 0 {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidExpiration, "timeout %d: want a positive number of seconds", *body.Timeout))
		return
	}
	if _, _, err := h.e2bLookup(r, c); err != nil {
		h.writeError(w, r, err)
		return
	}
	if _, err := h.svc.Renew(r.Context(), c, r.PathValue("id"), time.Now().Add(time.Duration(*body.Timeout)*time.Second)); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bPause is POST /sandboxes/{id}/pause: 204, or 409 when it is already paused.
func (h *Handler) e2bPause(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	sb, state, err := h.e2bLookup(r, c)
	if err == nil && state == e2bPaused {
		err = gateway.Errorf(gateway.KindConflict, gateway.CodeNotRunning, "sandbox %s is already paused", sb.ID)
	}
	if err == nil {
		err = h.svc.Pause(r.Context(), c, sb.ID)
	}
	if err == nil && sb.ExpiresAt != nil {
		// A paused sandbox is kept, as in E2B: for the longest lifetime the operator
		// allows, until a connect gives it a timeout again.
		_, err = h.svc.Renew(r.Context(), c, sb.ID, time.Now().Add(h.svc.Config().MaxTimeout-time.Second))
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bResumeBody is the body of a connect or resume.
type e2bResumeBody struct {
	Timeout *int64 `json:"timeout"`
}

// e2bResume is POST /sandboxes/{id}/resume, E2B's first API's resume: 201 with the
// sandbox, or 409 when it is not paused.
func (h *Handler) e2bResume(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	h.e2bWake(w, r, c, false)
}

// e2bConnect is POST /sandboxes/{id}/connect and /v2/…/connect: 200 with the sandbox
// when it runs, 201 when it was paused and is resumed.
func (h *Handler) e2bConnect(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	h.e2bWake(w, r, c, true)
}

// e2bWake resumes a paused sandbox (a running one only with running ok) and gives it
// timeout seconds from now (E2B's default when none is given); a running one keeps a
// later expiry.
func (h *Handler) e2bWake(w http.ResponseWriter, r *http.Request, c gateway.Caller, runningOK bool) {
	var body e2bResumeBody
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &body); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	timeout, err := h.e2bTimeout(body.Timeout)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	sb, state, err := h.e2bLookup(r, c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	switch {
	case state == e2bPaused:
		if err := h.svc.Resume(r.Context(), c, sb.ID); err != nil {
			h.writeError(w, r, err)
			return
		}
		status = http.StatusCreated
	case !runningOK:
		h.writeError(w, r, gateway.Errorf(gateway.KindConflict, gateway.CodeNotPaused, "sandbox %s is already running", sb.ID))
		return
	}
	// A connect never shortens the life of a running sandbox; a resumed one, kept while
	// paused, gets the timeout.
	if until := time.Now().Add(time.Duration(timeout) * time.Second); sb.ExpiresAt != nil && (status == http.StatusCreated || until.After(*sb.ExpiresAt)) {
		if _, err := h.svc.Renew(r.Context(), c, sb.ID, until); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	if sb, err = h.svc.Lookup(r.Context(), c, sb.ID); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, status, h.e2bSandboxOf(sb))
}

// e2bMetric is E2B's SandboxMetric, one sample of a sandbox's resource use.
type e2bMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// e2bMetrics is GET /sandboxes/{id}/metrics?start=&end= (unix seconds, both optional):
// the samples of the sandbox's resource use the gateway keeps (SandboxUsage), oldest
// first. What it does not measure (page cache, disk size) is 0.
func (h *Handler) e2bMetrics(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q := r.URL.Query()
	bound := func(name string) (time.Time, bool, error) {
		v := q.Get(name)
		if v == "" {
			return time.Time{}, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, false, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "%s %q: want unix seconds", name, v)
		}
		return time.Unix(n, 0), true, nil
	}
	start, hasStart, err := bound("start")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	end, hasEnd, err := bound("end")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if _, _, err := h.e2bLookup(r, c); err != nil {
		h.writeError(w, r, err)
		return
	}
	use, err := h.svc.Usage().SandboxUsage(r.Context(), c, r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := make([]e2bMetric, 0, len(use.History))
	for _, p := range use.History {
		if (hasStart && p.Time.Before(start)) || (hasEnd && p.Time.After(end)) {
			continue
		}
		m := e2bMetric{Timestamp: p.Time.UTC(), TimestampUnix: p.Time.Unix(), CPUUsedPct: p.CPUPercent,
			MemUsed: p.MemoryBytes, MemTotal: p.MemoryLimitBytes}
		if p.CPULimitCores != nil {
			m.CPUCount = int(*p.CPULimitCores + 0.999)
		}
		if p.DiskBytes != nil {
			m.DiskUsed = *p.DiskBytes
		}
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
}
