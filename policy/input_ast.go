package policy

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// The access decision runs on every request, so its input is turned into an
// OPA value directly instead of through a JSON round trip; the result must
// equal what json.Marshal of the same struct would give (a test holds it to
// that), omitempty fields included.

type objectBuilder struct{ terms [][2]*ast.Term }

func (b *objectBuilder) str(key, value string, omitEmpty bool) {
	if omitEmpty && value == "" {
		return
	}
	b.terms = append(b.terms, [2]*ast.Term{ast.InternedTerm(key), ast.StringTerm(value)})
}

func (b *objectBuilder) int(key string, value int, omitEmpty bool) {
	if omitEmpty && value == 0 {
		return
	}
	b.terms = append(b.terms, [2]*ast.Term{ast.InternedTerm(key), ast.InternedTerm(value)})
}

func (b *objectBuilder) bool(key string, value, omitEmpty bool) {
	if omitEmpty && !value {
		return
	}
	b.terms = append(b.terms, [2]*ast.Term{ast.InternedTerm(key), ast.InternedTerm(value)})
}

func (b *objectBuilder) value(key string, v ast.Value) {
	b.terms = append(b.terms, [2]*ast.Term{ast.InternedTerm(key), ast.NewTerm(v)})
}

func (b *objectBuilder) object() ast.Object { return ast.NewObject(b.terms...) }

// astValue mirrors the JSON tags of AccessInput.
func (in AccessInput) astValue() (ast.Value, error) {
	var p objectBuilder
	p.str("kind", in.Principal.Kind, false)
	p.str("id", in.Principal.ID, true)
	p.str("tenant", in.Principal.Tenant, true)
	p.str("role", in.Principal.Role, true)
	p.str("sandbox", in.Principal.Sandbox, true)
	p.int("port", in.Principal.Port, true)

	var r objectBuilder
	r.str("kind", in.Resource.Kind, true)
	r.str("id", in.Resource.ID, true)
	r.str("tenant", in.Resource.Tenant, true)
	r.bool("public", in.Resource.Public, true)
	r.int("port", in.Resource.Port, true)

	var q objectBuilder
	q.str("method", in.Request.Method, true)
	q.str("path", in.Request.Path, true)
	if in.Request.Body != nil {
		body, err := ast.InterfaceToValue(in.Request.Body)
		if err != nil {
			return nil, err
		}
		q.value("body", body)
	}

	var top objectBuilder
	top.value("principal", p.object())
	top.str("tenant", in.Tenant, true)
	top.str("action", in.Action, false)
	top.value("resource", r.object())
	top.value("request", q.object())
	return top.object(), nil
}
