package sandgate

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultproto"
)

// CredentialProxy asks for a sandbox's credential vault (CreateRequest.CredentialProxy;
// it needs a NetworkPolicy too).
type CredentialProxy struct {
	Enabled bool `json:"enabled"`
}

// The credential vault's wire shapes, which the enforcer decodes too (package
// vaultproto documents each one).
type (
	// Credential is a named secret given to the vault. Its value is write-only: no
	// answer of the vault ever repeats it.
	Credential = vaultproto.Credential
	// CredentialSource is where a credential's value comes from; only "inline" exists.
	CredentialSource = vaultproto.CredentialSource
	// Binding says which of the workload's requests get which credential, and as what.
	Binding = vaultproto.Binding
	// BindingMatch selects requests; omitted lists take the server's defaults (https,
	// port 443, every method and path). Hosts must be allowed by the egress policy.
	BindingMatch = vaultproto.BindingMatch
	// BindingAuth renders a credential into headers: bearer, basic and apiKey (header
	// Name) name one Credential; customHeaders lists Headers.
	BindingAuth = vaultproto.BindingAuth
	// HeaderSource is one header of a customHeaders auth.
	HeaderSource = vaultproto.HeaderSource
	// VaultState is the vault as the server describes it: no credential value ever.
	VaultState = vaultproto.State
	// CredentialMetadata describes a stored credential.
	CredentialMetadata = vaultproto.CredentialMetadata
	// BindingMetadata describes a stored binding, its match with the defaults filled in.
	BindingMetadata = vaultproto.BindingMetadata
	// VaultPatch changes a vault; ExpectedRevision (when set) refuses the change with
	// ErrVaultRevisionConflict if the vault moved on since it was read.
	VaultPatch = vaultproto.Patch
	// CredentialChanges adds, replaces and deletes (by name) credentials.
	CredentialChanges = vaultproto.CredentialChanges
	// BindingChanges adds, replaces and deletes (by name) bindings.
	BindingChanges = vaultproto.BindingChanges
)

// InlineCredential is a credential with its value given inline.
func InlineCredential(name, value string) Credential {
	return Credential{Name: name, Source: CredentialSource{Type: "inline", Value: value}}
}

// Auth types of a binding.
const (
	AuthBearer        = vaultproto.AuthBearer
	AuthBasic         = vaultproto.AuthBasic
	AuthAPIKey        = vaultproto.AuthAPIKey
	AuthCustomHeaders = vaultproto.AuthCustomHeaders
)

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
	return call[VaultState](ctx, v.a, method, path, nil, body)
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
	return v.state(ctx, http.MethodPost, "/credential-vault", vaultproto.Create{Credentials: creds, Bindings: bindings})
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
	return call[CredentialMetadata](ctx, v.a, http.MethodGet, "/credential-vault/credentials/"+url.PathEscape(name), nil, nil)
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
	return call[BindingMetadata](ctx, v.a, http.MethodGet, "/credential-vault/bindings/"+url.PathEscape(name), nil, nil)
}
