package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HookRequest is what the enforcer POSTs to the policy hook before a change made
// through its API takes effect.
type HookRequest struct {
	// Operation is "replace", "patch" or "delete": the API call that produced Proposed.
	Operation string `json:"operation"`
	// Current is the policy in force.
	Current Policy `json:"current"`
	// Proposed is the policy the caller asked for, already merged and validated.
	Proposed Policy `json:"proposed"`
}

// HookResponse is the hook's 200 answer: the policy to apply, which may differ from
// the proposal (rules removed or added by the gateway's Rego).
type HookResponse struct {
	Policy Policy `json:"policy"`
}

// errHookDenied carries the hook's 403 message back to the API caller.
type errHookDenied struct{ message string }

func (e *errHookDenied) Error() string { return e.message }

// policyHook asks the gateway which policy to apply. A nil *policyHook applies what
// it is given (no gateway in the loop).
type policyHook struct {
	url    string
	token  string
	client *http.Client
}

func newPolicyHook(url, token string) *policyHook {
	if url == "" {
		return nil
	}
	return &policyHook{url: url, token: token, client: &http.Client{Timeout: 5 * time.Second}}
}

// decide returns the policy to apply. Any failure (unreachable, timeout, non-200,
// bad body) is an error: the enforcer then keeps the policy in force (fail closed).
func (h *policyHook) decide(ctx context.Context, req HookRequest) (Policy, error) {
	if h == nil {
		return req.Proposed, nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Policy{}, fmt.Errorf("encode policy hook request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return Policy{}, fmt.Errorf("build policy hook request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if h.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(hreq)
	if err != nil {
		return Policy{}, fmt.Errorf("call policy hook: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return Policy{}, fmt.Errorf("read policy hook response: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden:
		var e apiError
		if json.Unmarshal(data, &e) != nil || e.Message == "" {
			e.Message = "the platform policy rejected this egress policy"
		}
		return Policy{}, &errHookDenied{message: e.Message}
	default:
		return Policy{}, fmt.Errorf("policy hook answered %s", resp.Status)
	}
	var hr HookResponse
	if err := json.Unmarshal(data, &hr); err != nil {
		return Policy{}, fmt.Errorf("decode policy hook response: %w", err)
	}
	return hr.Policy, nil
}
