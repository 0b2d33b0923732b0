package sandgate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/apiproto"
)

// Capacity sizes a pool: it keeps between BufferMin and BufferMax ready sandboxes, and
// between PoolMin and PoolMax in all.
type Capacity struct {
	BufferMin int `json:"bufferMin"`
	BufferMax int `json:"bufferMax"`
	PoolMin   int `json:"poolMin"`
	PoolMax   int `json:"poolMax"`
}

// PoolRequest creates or replaces a pool.
type PoolRequest struct {
	Name         string        `json:"name"`
	Template     CreateRequest `json:"template"`
	CapacitySpec Capacity      `json:"capacitySpec"`
}

// PoolStatus counts a pool's sandboxes.
type PoolStatus struct {
	Total     int `json:"total"`
	Allocated int `json:"allocated"`
	Available int `json:"available"`
	Starting  int `json:"starting"`
}

// Pool is a pool of warm sandboxes.
type Pool struct {
	Name         string        `json:"name"`
	Template     CreateRequest `json:"template"`
	CapacitySpec Capacity      `json:"capacitySpec"`
	Status       PoolStatus    `json:"status"`
	CreatedAt    time.Time     `json:"createdAt"`
	UpdatedAt    time.Time     `json:"updatedAt"`
}

// CreatePool creates a pool.
func (c *Client) CreatePool(ctx context.Context, req PoolRequest) (*Pool, error) {
	return call[Pool](ctx, c, http.MethodPost, "/pools", nil, req)
}

// UpdatePool replaces a pool's template and capacity.
func (c *Client) UpdatePool(ctx context.Context, req PoolRequest) (*Pool, error) {
	return call[Pool](ctx, c, http.MethodPut, "/pools/"+url.PathEscape(req.Name), nil, req)
}

// GetPool returns one pool.
func (c *Client) GetPool(ctx context.Context, name string) (*Pool, error) {
	return call[Pool](ctx, c, http.MethodGet, "/pools/"+url.PathEscape(name), nil, nil)
}

// ListPools returns the caller's pools.
func (c *Client) ListPools(ctx context.Context) ([]Pool, error) {
	return list[Pool](ctx, c, "/pools")
}

// DeletePool removes a pool and its idle sandboxes.
func (c *Client) DeletePool(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/pools/"+url.PathEscape(name), nil, nil, nil)
}

// BatchRequest asks for Count sandboxes at once, from a pool (PoolRef) or from a
// Template (package apiproto documents each field).
type BatchRequest = apiproto.BatchRequest[CreateRequest]

// Batches as the gateway answers them (package apiproto documents each field).
type (
	// Batch is a group of sandboxes created together; Done reports whether no member
	// is still pending.
	Batch = apiproto.Batch
	// BatchMember is one sandbox of a batch; Error says why a failed member failed.
	BatchMember = apiproto.BatchMember
	// BatchSummary counts a batch's members by state.
	BatchSummary = apiproto.BatchSummary
)

// CreateBatch starts a batch; its members become Running in the background.
func (c *Client) CreateBatch(ctx context.Context, req BatchRequest) (*Batch, error) {
	return call[Batch](ctx, c, http.MethodPost, "/batches", nil, req)
}

// GetBatch returns a batch with its members' current states.
func (c *Client) GetBatch(ctx context.Context, id string) (*Batch, error) {
	return call[Batch](ctx, c, http.MethodGet, "/batches/"+url.PathEscape(id), nil, nil)
}

// DeleteBatch removes a batch and its sandboxes.
func (c *Client) DeleteBatch(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/batches/"+url.PathEscape(id), nil, nil, nil)
}

// WaitBatch polls a batch until no member is pending, calling progress (may be nil)
// after every look.
func (c *Client) WaitBatch(ctx context.Context, id string, progress func(*Batch)) (*Batch, error) {
	for {
		b, err := c.GetBatch(ctx, id)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(b)
		}
		if b.Done() {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return b, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// Quotas bound what a tenant may use.
type Quotas struct {
	MaxConcurrent      int      `json:"maxConcurrent,omitempty"`
	MaxCPUMillis       int64    `json:"maxCpuMillis,omitempty"`
	MaxMemoryBytes     int64    `json:"maxMemoryBytes,omitempty"`
	MaxTimeoutSeconds  int64    `json:"maxTimeoutSeconds,omitempty"`
	MaxBatchSize       int      `json:"maxBatchSize,omitempty"`
	AllowedImages      []string `json:"allowedImages,omitempty"`
	CreateRate         float64  `json:"createRate,omitempty"`
	CreateBurst        float64  `json:"createBurst,omitempty"`
	Runtime            string   `json:"runtime,omitempty"`
	DefaultCPUMillis   int64    `json:"defaultCpuMillis,omitempty"`
	DefaultMemoryBytes int64    `json:"defaultMemoryBytes,omitempty"`
}

// Tenant is an isolated customer of the gateway.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Quotas    Quotas    `json:"quotas"`
	CreatedAt time.Time `json:"createdAt"`
}

// TenantRequest creates or changes a tenant.
type TenantRequest struct {
	Name   string  `json:"name,omitempty"`
	Quotas *Quotas `json:"quotas,omitempty"`
}

// Key is an API key; Key (the secret) is set only in the answer that created it.
type Key struct {
	ID        string    `json:"id"`
	Key       string    `json:"key,omitempty"`
	Role      string    `json:"role"`
	Tenant    string    `json:"tenant"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
}

// Key roles.
const (
	RoleAdmin       = "admin"
	RoleTenantAdmin = "tenant-admin"
	RoleMember      = "member"
	RoleViewer      = "viewer"
)

// CreateTenant creates a tenant (platform admins only).
func (c *Client) CreateTenant(ctx context.Context, req TenantRequest) (*Tenant, error) {
	return call[Tenant](ctx, c, http.MethodPost, "/tenants", nil, req)
}

// ListTenants lists the tenants.
func (c *Client) ListTenants(ctx context.Context) ([]Tenant, error) {
	return list[Tenant](ctx, c, "/tenants")
}

// GetTenant returns one tenant.
func (c *Client) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	return call[Tenant](ctx, c, http.MethodGet, "/tenants/"+url.PathEscape(id), nil, nil)
}

// UpdateTenant changes a tenant's name or quotas.
func (c *Client) UpdateTenant(ctx context.Context, id string, req TenantRequest) (*Tenant, error) {
	return call[Tenant](ctx, c, http.MethodPatch, "/tenants/"+url.PathEscape(id), nil, req)
}

// CreateKey issues a key of role for a tenant; the answer is the only time its secret is shown.
func (c *Client) CreateKey(ctx context.Context, tenant, role string) (*Key, error) {
	return call[Key](ctx, c, http.MethodPost, "/tenants/"+url.PathEscape(tenant)+"/keys", nil, map[string]string{"role": role})
}

// ListKeys lists a tenant's keys (without their secrets).
func (c *Client) ListKeys(ctx context.Context, tenant string) ([]Key, error) {
	return list[Key](ctx, c, "/tenants/"+url.PathEscape(tenant)+"/keys")
}

// RevokeKey revokes one key.
func (c *Client) RevokeKey(ctx context.Context, tenant, keyID string) error {
	return c.do(ctx, http.MethodDelete, "/tenants/"+url.PathEscape(tenant)+"/keys/"+url.PathEscape(keyID), nil, nil, nil)
}

// PolicyModule is one Rego module in force.
type PolicyModule struct {
	Name      string `json:"name"`
	Package   string `json:"package"`
	Origin    string `json:"origin"` // default, operator or override
	Overrides string `json:"overrides,omitempty"`
	Source    string `json:"source"`
}

// Policy is the Rego policy in force.
type Policy struct {
	Version   string         `json:"version"`
	Modules   []PolicyModule `json:"modules"`
	Tests     []PolicyModule `json:"tests,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
	Overrides []string       `json:"overrides,omitempty"`
}

// GetPolicy returns the policy in force.
func (c *Client) GetPolicy(ctx context.Context) (*Policy, error) {
	return call[Policy](ctx, c, http.MethodGet, "/policy", nil, nil)
}

// PushPolicy replaces the named modules (name → Rego source) on every gateway.
func (c *Client) PushPolicy(ctx context.Context, modules map[string]string) (*Policy, error) {
	return call[Policy](ctx, c, http.MethodPut, "/policy", nil, map[string]any{"modules": modules})
}

// ResetPolicy drops the override of one module ("" drops all).
func (c *Client) ResetPolicy(ctx context.Context, module string) (*Policy, error) {
	var p Policy
	var q url.Values
	if module != "" {
		q = url.Values{"module": {module}}
	}
	if err := c.do(ctx, http.MethodDelete, "/policy/overrides", q, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// EvalPolicy evaluates one decision (access, admission, egress or a query) against
// input, with modules (may be nil) in place of the ones in force. The answer is the
// server's JSON.
func (c *Client) EvalPolicy(ctx context.Context, decision string, input any, modules map[string]string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodPost, "/policy/eval", nil, map[string]any{"decision": decision, "input": input, "modules": modules}, &out)
	return out, err
}

// TestPolicy runs the Rego unit tests of the policy in force with modules (may be nil)
// in place of the ones they name. The answer is the server's JSON report.
func (c *Client) TestPolicy(ctx context.Context, modules map[string]string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodPost, "/policy/test", nil, map[string]any{"modules": modules}, &out)
	return out, err
}

// PluginConfig configures an uploaded plugin.
type PluginConfig struct {
	Hooks    []string       `json:"hooks"`
	Limits   map[string]any `json:"limits,omitempty"`
	Settings map[string]any `json:"settings,omitempty"`
}

// Plugin is an installed WASM plugin.
type Plugin struct {
	Name      string         `json:"name"`
	Version   string         `json:"version"`
	Hash      string         `json:"hash"`
	Hooks     []string       `json:"hooks"`
	Limits    map[string]any `json:"limits,omitempty"`
	Settings  map[string]any `json:"settings,omitempty"`
	UpdatedAt time.Time      `json:"updatedAt"`
	Loaded    bool           `json:"loaded"`
	LoadError string         `json:"loadError,omitempty"`
	Stats     map[string]any `json:"stats,omitempty"`
}

// PushPlugin installs or replaces a plugin from its WASM bytes.
func (c *Client) PushPlugin(ctx context.Context, name string, module []byte, cfg PluginConfig) (*Plugin, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("module", name+".wasm")
	_, _ = fw.Write(module)
	cw, _ := mw.CreateFormField("config")
	_ = json.NewEncoder(cw).Encode(cfg)
	_ = mw.Close()
	req, err := c.newRequest(ctx, http.MethodPut, c.url("/v1/plugins/"+url.PathEscape(name), nil), &body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var p Plugin
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, fmt.Errorf("sandgate: push plugin: %w", err)
	}
	return &p, nil
}

// ListPlugins lists the installed plugins.
func (c *Client) ListPlugins(ctx context.Context) ([]Plugin, error) {
	return list[Plugin](ctx, c, "/plugins")
}

// GetPlugin returns one plugin with its statistics.
func (c *Client) GetPlugin(ctx context.Context, name string) (*Plugin, error) {
	return call[Plugin](ctx, c, http.MethodGet, "/plugins/"+url.PathEscape(name), nil, nil)
}

// DeletePlugin uninstalls a plugin.
func (c *Client) DeletePlugin(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/plugins/"+url.PathEscape(name), nil, nil, nil)
}

// Event is one entry of a tenant's audit stream.
type Event struct {
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	Tenant    string         `json:"tenant"`
	SandboxID string         `json:"sandboxId,omitempty"`
	Time      time.Time      `json:"time"`
	Data      map[string]any `json:"data,omitempty"`
}

// EventQuery filters events. Zero values ask for everything of the caller's tenant.
type EventQuery struct {
	Tenant  string   // another tenant's (admins only)
	Sandbox string   // one sandbox's
	Types   []string // only these types ("sandbox.*" patterns as the server accepts)
	Exclude []string // not these
	Cursor  string   // continue after this id
	Limit   int
	Newest  bool // newest first
}

func (q EventQuery) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("tenant", q.Tenant)
	set("sandbox", q.Sandbox)
	set("cursor", q.Cursor)
	if len(q.Types) > 0 {
		v.Set("type", strings.Join(q.Types, ","))
	}
	if len(q.Exclude) > 0 {
		v.Set("exclude", strings.Join(q.Exclude, ","))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Newest {
		v.Set("order", "newest")
	}
	return v
}

// EventPage is one page of events.
type EventPage struct {
	Items      []Event `json:"items"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// ListEvents returns one page of events.
func (c *Client) ListEvents(ctx context.Context, q EventQuery) (*EventPage, error) {
	return call[EventPage](ctx, c, http.MethodGet, "/events", q.values(), nil)
}

// FollowEvents streams events as they are written, from q.Cursor on (or from now),
// until ctx ends or the connection breaks; a broken stream ends the sequence with its
// error.
func (c *Client) FollowEvents(ctx context.Context, q EventQuery) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for e, err := range c.stream(ctx, "/events/stream", q.values(), "event stream") {
			if err != nil {
				yield(Event{}, err)
				return
			}
			var ev Event
			if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
				yield(Event{}, fmt.Errorf("sandgate: bad event: %w", err))
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}
