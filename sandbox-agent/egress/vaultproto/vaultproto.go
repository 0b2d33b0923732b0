// Package vaultproto declares the JSON shapes of the credential vault API (OpenSandbox's
// egress-api.yaml): the egress enforcer decodes and answers them, the Go SDK sends and
// reads them. It is a leaf (it imports only strictjson, a leaf too), so that the two
// agree on the shapes by construction instead of by copy, and the gateway, which judges
// the bodies, decodes them exactly as the enforcer does.
package vaultproto

import (
	"bytes"

	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

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

// Binding says which of the workload's requests get which credential, and as what.
type Binding struct {
	Name  string       `json:"name"`
	Match BindingMatch `json:"match"`
	Auth  BindingAuth  `json:"auth"`
}

// BindingMatch selects requests; omitted lists take the spec's defaults (https, port
// 443, every method and path). Hosts must be allowed by the egress policy.
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

// State is the vault as the enforcer describes it (CredentialVaultState): no
// credential value ever.
type State struct {
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

// BindingMetadata describes a stored binding (CredentialBindingMetadata), its match
// with the defaults filled in.
type BindingMetadata struct {
	Name     string       `json:"name"`
	Revision int64        `json:"revision"`
	Match    BindingMatch `json:"match"`
	Auth     AuthMetadata `json:"auth"`
}

// AuthMetadata is a binding's auth without the credentials it names
// (CredentialAuthMetadata).
type AuthMetadata struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

// Create is the body of POST /credential-vault. Both lists must be given (the
// enforcer refuses a body without either); null for a list is the empty list.
type Create struct {
	Credentials List[Credential] `json:"credentials"`
	Bindings    List[Binding]    `json:"bindings"`
}

// List is a JSON array of which null reads as the empty list (not nil), so that a
// decoded body tells a list given as null, which clients send for "none", from one not
// given at all (nil). Its items are decoded as strictly as the body around them
// (strictjson: unknown fields refused).
type List[T any] []T

// UnmarshalJSON reads null as the empty list and anything else as a strict []T.
func (l *List[T]) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*l = List[T]{}
		return nil
	}
	var items []T
	if err := strictjson.Decode(data, &items); err != nil {
		return err
	}
	*l = items
	return nil
}

// Patch is the body of PATCH /credential-vault. ExpectedRevision (when set) refuses the
// change if the vault moved on since it was read.
type Patch struct {
	ExpectedRevision *int64             `json:"expectedRevision,omitempty"`
	Credentials      *CredentialChanges `json:"credentials,omitempty"`
	Bindings         *BindingChanges    `json:"bindings,omitempty"`
}

// CredentialChanges adds, replaces and deletes (by name) credentials
// (CredentialMutationSet).
type CredentialChanges struct {
	Add     []Credential `json:"add,omitempty"`
	Replace []Credential `json:"replace,omitempty"`
	Delete  []string     `json:"delete,omitempty"`
}

// BindingChanges adds, replaces and deletes (by name) bindings
// (CredentialBindingMutationSet).
type BindingChanges struct {
	Add     []Binding `json:"add,omitempty"`
	Replace []Binding `json:"replace,omitempty"`
	Delete  []string  `json:"delete,omitempty"`
}
