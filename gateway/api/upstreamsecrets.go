package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

// upstreamSecretsKey carries the credential headers a forwarded request must present to
// the sandbox (the agent's or the enforcer's token).
type upstreamSecretsKey struct{}

// withUpstreamSecret marks r to reach the sandbox with header name: value. The header is
// not set on r itself: a Forward adds it in its transport (AddUpstreamSecrets), below
// every layer that logs requests (Caddy's reverse_proxy logs the request it hands to the
// transport, headers included, on every upstream error and at debug level).
func withUpstreamSecret(r *http.Request, name, value string) *http.Request {
	h := http.Header{}
	if prev, ok := r.Context().Value(upstreamSecretsKey{}).(http.Header); ok {
		h = prev.Clone()
	}
	h.Set(name, value)
	return r.WithContext(context.WithValue(r.Context(), upstreamSecretsKey{}, h))
}

// AddUpstreamSecrets returns req with the credential headers withUpstreamSecret put in its
// context, on a copy with its own header map (a RoundTripper must not change the request
// it is given, and the caller may log that one); req itself when there are none.
func AddUpstreamSecrets(req *http.Request) *http.Request {
	secrets, ok := req.Context().Value(upstreamSecretsKey{}).(http.Header)
	if !ok || len(secrets) == 0 {
		return req
	}
	out := new(http.Request)
	*out = *req
	out.Header = req.Header.Clone()
	if out.Header == nil {
		out.Header = http.Header{}
	}
	for name, values := range secrets {
		out.Header[name] = values
	}
	return out
}

// SecretHeaderTransport wraps next so that each request leaves with its upstream
// credential headers (AddUpstreamSecrets). Every Forward's transport must be one.
type SecretHeaderTransport struct{ Next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t SecretHeaderTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Next.RoundTrip(AddUpstreamSecrets(req))
	if err == nil && resp.StatusCode == http.StatusUnauthorized && notThisAgentMatters(req) {
		// The gateway sends the sandbox's own agent token: an agent refusing it is another
		// sandbox's, which took over the address of a pool member that died. The forward's
		// error handler then tells the caller (upstreamFailedKey).
		resp.Body.Close()
		return nil, errNotThisAgent
	}
	return resp, err
}

var errNotThisAgent = errors.New("the agent at the sandbox's address refused its token: another sandbox holds the address")

// notThisAgentMatters reports whether req went to a claimed pool member's agent (the
// only sandboxes whose death after a claim is looked for; see Service.UpstreamFailed).
func notThisAgentMatters(req *http.Request) bool {
	if _, ok := req.Context().Value(upstreamFailedKey{}).(func(error) error); !ok {
		return false
	}
	secrets, _ := req.Context().Value(upstreamSecretsKey{}).(http.Header)
	return secrets.Get(gateway.HeaderAgentToken) != ""
}

// AgentConnWarmer returns a gateway.ConnWarmer for a Forward's transport rt: a /ping to
// the agent through rt, with the agent's token added as for any forwarded call, leaves
// rt's keep-alive connection to it open and idle for the first real call.
func AgentConnWarmer(rt http.RoundTripper) gateway.ConnWarmer {
	return func(ctx context.Context, addr, agentToken string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/ping", nil)
		if err != nil {
			return err
		}
		resp, err := rt.RoundTrip(withUpstreamSecret(req, gateway.HeaderAgentToken, agentToken))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16)); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("agent /ping: %s", resp.Status)
		}
		return nil
	}
}
