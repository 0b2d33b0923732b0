package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/sandbox-agent/agentauth"
)

// upstreamSecretsKey carries the credentials a forwarded request must present to the
// sandbox: the agent's token, with which the transport signs the request.
type upstreamSecretsKey struct{}

// withUpstreamSecret marks r to reach the sandbox with credential name: value. Nothing
// is set on r itself: a Forward's transport signs with it (SignForUpstream), below
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

// SignForUpstream returns req signed with the agent token withUpstreamSecret put in its
// context (package agentauth: the token itself never travels), on a copy with its own
// header map (a RoundTripper must not change the request it is given, and the caller
// may log that one), and the token and nonce its answer must be verified with (no nonce
// for a legacy agent's credential, sent as it is); req itself and "" when it carries
// none.
func SignForUpstream(req *http.Request) (signed *http.Request, token, nonce string) {
	secrets, ok := req.Context().Value(upstreamSecretsKey{}).(http.Header)
	if !ok {
		return req, "", ""
	}
	token, legacy := agentauth.Credential(secrets.Get(gateway.HeaderAgentToken))
	if token == "" {
		return req, "", ""
	}
	out := new(http.Request)
	*out = *req
	out.Header = req.Header.Clone()
	if out.Header == nil {
		out.Header = http.Header{}
	}
	if legacy {
		// An agent older than signed calls takes its token itself (agentauth.Legacy).
		out.Header.Set(gateway.HeaderAgentToken, token)
		return out, token, ""
	}
	return out, token, agentauth.Sign(out, token, time.Now())
}

// SecretHeaderTransport wraps next so that each request to an agent leaves signed
// (SignForUpstream) and its answer is believed only if the agent signed it. Every
// Forward's transport must be one.
type SecretHeaderTransport struct{ Next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t SecretHeaderTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out, token, nonce := SignForUpstream(req)
	resp, err := t.Next.RoundTrip(out)
	if err != nil || token == "" {
		return resp, err
	}
	if nonce == "" {
		// A legacy agent: one refusing the sandbox's token is another sandbox's.
		if resp.StatusCode == http.StatusUnauthorized && notThisAgentMatters(req) {
			resp.Body.Close()
			return nil, errNotThisAgent
		}
		return resp, nil
	}
	if !agentauth.Answered(resp, token, nonce) {
		// Not the sandbox's agent: another sandbox's, which took over the address of a
		// sandbox that died (the forward's error handler then tells the caller,
		// upstreamFailedKey), or something that took the address. Nothing of its answer
		// is relayed.
		resp.Body.Close()
		return nil, errNotThisAgent
	}
	resp.Header.Del(agentauth.Scheme.HeaderResponseSignature)
	return resp, nil
}

var errNotThisAgent = errors.New("the answer at the sandbox's address is not signed by its agent: another sandbox holds the address")

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

// notThisAgentMatters reports whether req is a call the proxy forwards to a sandbox,
// whose failure is looked into (gateway.Upstream.Failed), rather than the gateway's own
// call (a connection warm-up), which reports the agent's answer as it is.
func notThisAgentMatters(req *http.Request) bool {
	_, ok := req.Context().Value(upstreamKeyOpened{}).(*gateway.Upstream)
	return ok
}
