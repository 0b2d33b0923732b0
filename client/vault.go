package sandgate

import (
	"context"
	"net/http"
	"net/url"
)

// CredentialProxy asks for a sandbox's credential vault (CreateRequest.CredentialProxy;
// it needs a NetworkPolicy too).
type CredentialProxy struct {
	Enabled bool `json:"enabled"`
}

// Credential is a named secret given to the vault. Its value is write-only: no answer
// of the vault ever repeats it.
type Credential struct {
	Name   string           `json:"name"`
	Source CredentialSource `json:"source"`
}

// CredentialSource is where a credential's value comes from; only "inline" exists.
type CredentialSource struct {
	Type  string `json:"type,omitempty"`
	Value string `json:"value"`
}

// InlineCredential is a credential with its value given inline.
func InlineCredential(name, value string) Credential {
	return Credential{Name: name, Source: CredentialSource{Type: "inline", Value: value}}
}

// Binding says which of the workload's requests get which credential, and as what.
type Binding struct {
	Name  string       `json:"name"`
	Match BindingMatch `json:"match"`
	Auth  BindingAuth  `json:"auth"`
}

// BindingMatch selects requests; omitted lists take the server's defaults (https,
// port 443, every method and path). Hosts must be allowed by the egress policy.
type BindingMatch struct {
	Schemes []string `json:"schemes,omitempty"`
	Ports   []int    `json:"ports,omitempty"`
	Hosts   []string `json:"hosts"`
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
}

// Auth types of a binding.
const (
	AuthBearer        = "bearer"
	AuthBasic         = "basic"
	AuthAPIKey        = "apiKey"
	AuthCustomHeaders = "customHeaders"
)

// BindingAuth renders a credential into headers: bearer, basic and apiKey (header
// Name) name one Credential; customHeaders lists Headers.
type BindingAuth struct {
	Type       string         `json:"type"`
	Credential string         `json:"credential,omitempty"`
	Name       string         `json:"name,omitempty"`
	Headers    []HeaderSource `json:"headers,omitempty"`
}

// HeaderSource is one header of a customHeaders auth.
type HeaderSource struct {
	Name       string `json:"name"`
	Credential string `json:"credential"`
}

// VaultState is the vault as the server describes it: no credential value ever.
type VaultState struct {
	Revision    int64                `json:"revision"`
	Credentials []CredentialMetadata `json:"credentials"`
	Bindings    []BindingMetadata    `json:"bindings"`
}

// CredentialMetadata describes a stored credential.
type CredentialMetadata struct {
	Name       string `json:"name"`
	SourceType string `json:"sourceType"`
	Revision   int64  `json:"revision"`
}

// BindingMetadata describes a stored binding, its match with the defaults filled in.
type BindingMetadata struct {
	Name     string       `json:"name"`
	Revision int64        `json:"revision"`
	Match    BindingMatch `json:"match"`
	Auth     struct {
		Type string `json:"type"`
		Name string `json:"name,omitempty"`
	} `json:"auth"`
}

// VaultPatch changes a vault; ExpectedRevision (when set) refuses the change with
// ErrVaultRevisionConflict if the vault moved on since it was read.
type VaultPatch struct {
	ExpectedRevision *int64             `json:"expectedRevision,omitempty"`
	Credentials      *CredentialChanges `json:"credentials,omitempty"`
	Bindings         *BindingChanges    `json:"bindings,omitempty"`
}

// CredentialChanges adds, replaces and deletes (by name) credentials.
type CredentialChanges struct {
	Add     []Credential `json:"add,omitempty"`
	Replace []Credential `json:"replace,omitempty"`
	Delete  []string     `json:"delete,omitempty"`
}

// BindingChanges adds, replaces and deletes (by name) bindings.
type BindingChanges struct {
	Add     []Binding `json:"add,omitempty"`
	Replace []Binding `json:"replace,omitempty"`
	Delete  []string  `json:"delete,omitempty"`
}

// Vault returns a client of a sandbox's credential vault (the /credential-vault API of
// its egress enforcer, through the gateway, which checks each binding against the
// tenant's Rego vault policy). The sandbox must have been created with
// CredentialProxy enabled, else every call is ErrVaultProxyNotEnabled.
func (c *Client) Vault(ctx context.Context, sandboxID string) (*VaultClient, error) {
	a, err := c.portClient(ctx, sandboxID, EgressPort)
	if err != nil {
		return nil, err
	}
	return &VaultClient{a: a}, nil
}

// VaultClient reads and changes one sandbox's credential vault.
type VaultClient struct{ a *Agent }

func (v *VaultClient) state(ctx context.Context, method, path string, body any) (*VaultState, error) {
	var st VaultState
	if err := v.a.do(ctx, method, path, nil, body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Create makes the vault (ErrVaultAlreadyExists if there is one). Nil lists are sent
// as empty ones.
func (v *VaultClient) Create(ctx context.Context, creds []Credential, bindings []Binding) (*VaultState, error) {
	if creds == nil {
		creds = []Credential{}
	}
	if bindings == nil {
		bindings = []Binding{}
	}
	return v.state(ctx, http.MethodPost, "/credential-vault", map[string]any{"credentials": creds, "bindings": bindings})
}

// Get returns the vault (ErrVaultNotFound before Create).
func (v *VaultClient) Get(ctx context.Context) (*VaultState, error) {
	return v.state(ctx, http.MethodGet, "/credential-vault", nil)
}

// Patch changes the vault and returns its new state.
func (v *VaultClient) Patch(ctx context.Context, p VaultPatch) (*VaultState, error) {
	return v.state(ctx, http.MethodPatch, "/credential-vault", p)
}

// Delete removes the vault: nothing is injected any more.
func (v *VaultClient) Delete(ctx context.Context) error {
	return v.a.do(ctx, http.MethodDelete, "/credential-vault", nil, nil, nil)
}

// Credentials lists the stored credentials (names and revisions only).
func (v *VaultClient) Credentials(ctx context.Context) ([]CredentialMetadata, error) {
	st, err := v.state(ctx, http.MethodGet, "/credential-vault/credentials", nil)
	if err != nil {
		return nil, err
	}
	return st.Credentials, nil
}

// Credential describes one stored credential.
func (v *VaultClient) Credential(ctx context.Context, name string) (*CredentialMetadata, error) {
	var m CredentialMetadata
	if err := v.a.do(ctx, http.MethodGet, "/credential-vault/credentials/"+url.PathEscape(name), nil, nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Bindings lists the stored bindings.
func (v *VaultClient) Bindings(ctx context.Context) ([]BindingMetadata, error) {
	st, err := v.state(ctx, http.MethodGet, "/credential-vault/bindings", nil)
	if err != nil {
		return nil, err
	}
	return st.Bindings, nil
}

// Binding describes one stored binding.
func (v *VaultClient) Binding(ctx context.Context, name string) (*BindingMetadata, error) {
	var m BindingMetadata
	if err := v.a.do(ctx, http.MethodGet, "/credential-vault/bindings/"+url.PathEscape(name), nil, nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}
