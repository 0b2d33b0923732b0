// Package agentclient is the one HTTP client of a sandbox's agent and egress enforcer
// for sandgate's own calls (readiness pings, late binding, the deferred entrypoint, the
// signed policy API): the gateway core and the runtimes use it instead of each building
// requests by hand. It keeps connections alive (one dial per sandbox, not per call),
// sets the agent's token header, bounds every call with a timeout, and maps failures to
// two kinds a caller can tell apart: nothing answered (ErrUnreachable) and an answer
// that was not a success (*StatusError).
//
// A user's own agent traffic does not go through here: the gateway's proxy forwards it
// as it came, on its own keep-alive transport.
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agentauth"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
)

// ErrUnreachable wraps a call that got no answer: nothing listens at the address yet (a
// starting sandbox), the connection broke, or the timeout passed.
var ErrUnreachable = errors.New("sandbox unreachable")

// ErrUnsigned is returned by Policy when the answer does not carry the enforcer's
// signature: whatever listens on the enforcer port is not the enforcer (or it is
// restarting), and nothing it said may be believed.
var ErrUnsigned = errors.New("egress answer not signed by the enforcer")

// ErrNotTheAgent is an answer that does not carry the signature of the sandbox's agent:
// whatever answered at its address is not its agent (another sandbox holds the address,
// or something took it), and nothing it said may be believed.
var ErrNotTheAgent = errors.New("the answer is not signed by the sandbox's agent")

// StatusError is an answer that was not a 2xx; Body is its first bytes.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Body)
}

// maxErrorBody bounds what is kept of a failed answer; maxBody what is read of a good one.
const (
	maxErrorBody = 4 << 10
	maxBody      = 1 << 20
)

// Client calls agents and enforcers. The zero value is not usable; use New. It is safe
// for concurrent use and meant to be shared (its connections are the point).
type Client struct {
	hc *http.Client
}

// New returns a Client with its own keep-alive transport.
func New() *Client {
	return &Client{hc: &http.Client{Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// A few idle connections per sandbox: pings, late binding and policy calls are
		// rare and short, and thousands of sandboxes may be tracked.
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}}
}

// Wrapped returns a Client on the same connections whose requests go through
// wrap(transport) (the gateway adds its tracing there).
func (c *Client) Wrapped(wrap func(http.RoundTripper) http.RoundTripper) *Client {
	return &Client{hc: &http.Client{Transport: wrap(c.hc.Transport)}}
}

// HTTP is the client's http.Client, for a caller that builds a request of its own (a
// stream, a relayed body) on the same connections.
func (c *Client) HTTP() *http.Client { return c.hc }

// AgentURL is the base URL of the agent at addr (an IP or host, no port).
func AgentURL(addr string) string {
	return "http://" + net.JoinHostPort(addr, strconv.Itoa(agentproto.AgentPort))
}

// EnforcerURL is the base URL of the egress enforcer at addr.
func EnforcerURL(addr string) string {
	return "http://" + net.JoinHostPort(addr, strconv.Itoa(agentproto.EgressPort))
}

// Ping checks that the agent at addr answers GET /ping with token.
func (c *Client) Ping(ctx context.Context, addr, token string, timeout time.Duration) error {
	_, err := c.Agent(ctx, addr, token, http.MethodGet, agentproto.PathPing, nil, timeout)
	return err
}

// SetEnv hands a warm sandbox's agent the environment its claim binds late (PUT
// /sandgate/env): the entrypoint and later commands get it.
func (c *Client) SetEnv(ctx context.Context, addr, token string, env map[string]string, timeout time.Duration) error {
	_, err := c.Agent(ctx, addr, token, http.MethodPut, agentproto.PathEnv, map[string]any{"envs": env}, timeout)
	return err
}

// StartEntrypoint starts a warm sandbox's deferred entrypoint (POST /sandgate/entrypoint).
func (c *Client) StartEntrypoint(ctx context.Context, addr, token string, entrypoint []string, timeout time.Duration) error {
	_, err := c.Agent(ctx, addr, token, http.MethodPost, agentproto.PathEntrypoint, map[string]any{"entrypoint": entrypoint}, timeout)
	return err
}

// Metrics reads the agent's own resource reading (GET /metrics) and returns its JSON.
func (c *Client) Metrics(ctx context.Context, addr, token string, timeout time.Duration) ([]byte, error) {
	return c.Agent(ctx, addr, token, http.MethodGet, agentproto.PathMetrics, nil, timeout)
}

// Agent sends one request to the agent at addr, signed with token (an agentauth
// credential: a legacy agent's is sent as it is), body (when not nil) as JSON, and
// returns the answer's body when it is a 2xx signed by the agent (ErrNotTheAgent
// otherwise).
func (c *Client) Agent(ctx context.Context, addr, token, method, path string, body any, timeout time.Duration) ([]byte, error) {
	var js []byte
	if body != nil {
		var err error
		if js, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := newRequest(ctx, method, AgentURL(addr)+path, js)
	if err != nil {
		return nil, err
	}
	nonce := ""
	token, legacy := agentauth.Credential(token)
	switch {
	case token == "":
	case legacy:
		req.Header.Set(agentproto.HeaderAgentToken, token)
	default:
		// Signed, never the token itself (package agentauth).
		nonce = agentauth.Sign(req, token, time.Now())
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if nonce != "" && !agentauth.Answered(resp, token, nonce) {
		return nil, fmt.Errorf("%w: %s %s answered %d", ErrNotTheAgent, method, path, resp.StatusCode)
	}
	status := resp.StatusCode
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if status < 200 || status > 299 {
		return nil, &StatusError{Method: method, Path: path, Status: status, Body: string(truncate(data, maxErrorBody))}
	}
	return data, nil
}

// EnforcerHealthy checks that the enforcer at addr answers GET /healthz (unauthenticated:
// for an enforcer without a token).
func (c *Client) EnforcerHealthy(ctx context.Context, addr string, timeout time.Duration) error {
	_, err := c.EnforcerHealth(ctx, addr, timeout)
	return err
}

// EnforcerHealth returns the JSON of the enforcer's GET /healthz at addr (its counters),
// an error unless it answers 200. Nothing vouches for it: while the enforcer restarts,
// the workload could answer on its port.
func (c *Client) EnforcerHealth(ctx context.Context, addr string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := newRequest(ctx, http.MethodGet, EnforcerURL(addr)+agentproto.PathHealthz, nil)
	if err != nil {
		return nil, err
	}
	status, data, err := c.do(req)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, &StatusError{Method: http.MethodGet, Path: agentproto.PathHealthz, Status: status, Body: string(truncate(data, maxErrorBody))}
	}
	return data, nil
}

// Policy sends one request to the enforcer's /policy at addr, signed with token
// (egressauth: the token itself never goes on the wire), body (when not nil) as JSON
// bytes, and returns the status and body of the answer only if the enforcer signed it
// (else ErrUnsigned). Any status is returned as is: the policy API's answers are
// relayed.
func (c *Client) Policy(ctx context.Context, addr, token, method string, body []byte, timeout time.Duration) (int, []byte, error) {
	a, err := c.signed(ctx, addr, token, method, agentproto.PathPolicy, body, timeout)
	return a.Status, a.Body, err
}

// Answer is an answer of the enforcer's signed API, relayed to the gateway's caller as
// it is: its status and body.
type Answer struct {
	Status int
	Body   []byte
}

// OK reports whether the enforcer answered 200.
func (a Answer) OK() bool { return a.Status == http.StatusOK }

// GetPolicy reads the policy in force in the enforcer at addr (GET /policy, signed).
func (c *Client) GetPolicy(ctx context.Context, addr, token string, timeout time.Duration) (Answer, error) {
	return c.signed(ctx, addr, token, http.MethodGet, agentproto.PathPolicy, nil, timeout)
}

// PutPolicy replaces the policy of the enforcer at addr with policy, a JSON
// NetworkPolicy (PUT /policy, signed).
func (c *Client) PutPolicy(ctx context.Context, addr, token string, policy []byte, timeout time.Duration) (Answer, error) {
	return c.signed(ctx, addr, token, http.MethodPut, agentproto.PathPolicy, policy, timeout)
}

// ErrInvalidRequest wraps a request that could not be built from the caller's method and
// path (a vault path that is no URL path); nothing was sent.
var ErrInvalidRequest = errors.New("invalid enforcer request")

// Vault relays one request of the caller to the credential vault API of the enforcer at
// addr (method and path, under /credential-vault, are the caller's), signed as Policy's.
// The body, never logged, holds credentials.
func (c *Client) Vault(ctx context.Context, addr, token, method, path string, body []byte, timeout time.Duration) (Answer, error) {
	if len(body) == 0 {
		body = nil
	}
	return c.signed(ctx, addr, token, method, path, body, timeout)
}

// DrainVaultAudit takes the injection records the enforcer at addr holds (POST
// /sandgate/vault-audit, signed) and returns its answer's body when it is a 200.
func (c *Client) DrainVaultAudit(ctx context.Context, addr, token string, timeout time.Duration) ([]byte, error) {
	a, err := c.signed(ctx, addr, token, http.MethodPost, agentproto.PathVaultAudit, nil, timeout)
	if err != nil {
		return nil, err
	}
	if !a.OK() {
		return nil, &StatusError{Method: http.MethodPost, Path: agentproto.PathVaultAudit, Status: a.Status, Body: string(truncate(a.Body, maxErrorBody))}
	}
	return a.Body, nil
}

// signed sends one signed request to the enforcer at addr and returns its answer only if
// the enforcer signed it. An unsigned answer's status comes back with ErrUnsigned, for
// the caller's log; its body does not.
func (c *Client) signed(ctx context.Context, addr, token, method, path string, body []byte, timeout time.Duration) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := newRequest(ctx, method, EnforcerURL(addr)+path, body)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	nonce := egressauth.Sign(req, token, body, time.Now())
	resp, err := c.hc.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if !egressauth.VerifyResponse(token, nonce, resp.StatusCode, data, resp.Header.Get(egressauth.HeaderResponseSignature)) {
		return Answer{Status: resp.StatusCode}, ErrUnsigned
	}
	return Answer{Status: resp.StatusCode, Body: data}, nil
}

func newRequest(ctx context.Context, method, url string, js []byte) (*http.Request, error) {
	var rd io.Reader
	if js != nil {
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if js != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends req and reads its answer (bounded) to the end, so that the connection goes
// back to the idle pool.
func (c *Client) do(req *http.Request) (int, []byte, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return resp.StatusCode, data, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
