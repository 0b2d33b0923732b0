package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// batchAnswer is the part of a batch's answer these tests read.
type batchAnswer struct {
	ID      string `json:"id"`
	Members []struct {
		ID            string                 `json:"id"`
		Source        string                 `json:"source"`
		Status        struct{ State string } `json:"status"`
		AgentEndpoint *struct {
			Endpoint string            `json:"endpoint"`
			Headers  map[string]string `json:"headers"`
		} `json:"agentEndpoint"`
	} `json:"members"`
}

func decodeBatch(t testing.TB, r response) batchAnswer {
	t.Helper()
	var b batchAnswer
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("batch answer %s: %v", r.Body, err)
	}
	return b
}

// TestBatchAgentEndpoints: the answer of POST /v1/batches carries each Running member's
// agent endpoint, so that a client reaches the members without an endpoint call each.
// It is a credential, so it is attacked: another tenant's key cannot read the batch (nor
// its endpoints), a viewer of the same tenant (who may not reach sandboxes' ports) gets
// none, the header of one member opens no other sandbox (another member, another
// tenant's), and it dies with the key that read it. The first command through it sees
// the claim's env (late binding).
func TestBatchAgentEndpoints(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	ta, tb := admin.createTenant("batchers", nil), admin.createTenant("strangers", nil)
	kaID, ka := admin.issueKey(ta, "member")
	_, kOwner := admin.issueKey(ta, "tenant-admin") // cleans up after ka's revocation
	_, kv := admin.issueKey(ta, "viewer")
	_, kb := admin.issueKey(tb, "member")
	a, viewer, b := admin.asKey(ka), admin.asKey(kv), admin.asKey(kb)
	stranger := b.createSandbox(map[string]any{})

	a.createPool("ep", 3, 3, 0, 3, nil)
	a.waitAvailable("ep", 3, 3*time.Minute)
	// One more than the pool holds: that member starts cold, Pending in the answer.
	r := a.do("POST", "/v1/batches", map[string]any{"count": 4, "poolRef": "ep", "env": map[string]string{"BATCH_ENV": "bound"}})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	bt := decodeBatch(t, r)
	var warm []*agent
	var warmIDs []string
	var cold string
	for _, m := range bt.Members {
		switch {
		case m.Status.State == "Running" && m.AgentEndpoint != nil:
			if want := "/sandboxes/" + m.ID + "/proxy/44772"; !strings.HasSuffix(m.AgentEndpoint.Endpoint, want) {
				t.Fatalf("member %s: endpoint %q, want one ending in %q", m.ID, m.AgentEndpoint.Endpoint, want)
			}
			if v := m.AgentEndpoint.Headers["X-EXECD-ACCESS-TOKEN"]; !strings.HasPrefix(v, "sga1.") {
				t.Fatalf("member %s: headers %v, want a sandbox access value in X-EXECD-ACCESS-TOKEN", m.ID, m.AgentEndpoint.Headers)
			}
			warm = append(warm, &agent{t: t, base: "http://" + m.AgentEndpoint.Endpoint, headers: m.AgentEndpoint.Headers, client: admin.client})
			warmIDs = append(warmIDs, m.ID)
		case m.Status.State == "Pending" && m.AgentEndpoint == nil:
			cold = m.ID
		default:
			t.Fatalf("member %+v: want Running with an agent endpoint, or Pending without one", m)
		}
	}
	if len(warm) != 3 || cold == "" {
		t.Fatalf("%d warm members with endpoints and cold %q; want 3 and one", len(warm), cold)
	}
	status := func(a *agent, path string) (int, string) {
		resp := a.request("GET", path, nil, "")
		return resp.StatusCode, readAll(t, resp)
	}

	t.Run("the endpoint opens its member, whose first command sees the claim's env", func(t *testing.T) {
		for _, w := range warm {
			if out := stdoutOf(w.run("echo $BATCH_ENV")); out != "bound" {
				t.Fatalf("first command through %s: %q, want the claim's env", w.base, out)
			}
		}
	})
	t.Run("the SDK uses it", func(t *testing.T) {
		c, ctx := sdkClient(t, a, ka), context.Background()
		var created sandgate.Batch // the create's answer, as CreateBatch decodes it
		if err := json.Unmarshal(r.Body, &created); err != nil {
			t.Fatal(err)
		}
		// Read without agentEndpoints: the SDK falls back to the endpoint call.
		read, err := c.GetBatch(ctx, bt.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range []*sandgate.Batch{&created, read} {
			for _, m := range b.Members {
				if m.Status.State != "Running" {
					continue
				}
				if (m.AgentEndpoint != nil) != (b == &created) {
					t.Fatalf("member %s: agent endpoint %+v (in the create's answer: %v)", m.ID, m.AgentEndpoint, b == &created)
				}
				ag, err := c.MemberAgent(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				if res, err := ag.Exec(ctx, "echo sdk"); err != nil || res.Stdout != "sdk\n" {
					t.Fatalf("SDK command on %s: %+v %v", m.ID, res, err)
				}
			}
		}
	})
	t.Run("one member's header opens no other sandbox", func(t *testing.T) {
		h := warm[0].headers
		for _, other := range []string{warm[1].base, strings.Replace(warm[1].base, warmIDs[1], stranger, 1)} {
			if !strings.Contains(other, "/proxy/44772") {
				t.Fatalf("bad target %q", other)
			}
			forged := &agent{t: t, base: other, headers: h, client: admin.client}
			if st, body := status(forged, "/ping"); st != 403 {
				t.Fatalf("member 0's header on %s: %d %s, want 403", other, st, body)
			}
		}
	})
	t.Run("another tenant's key reads neither the batch nor its endpoints", func(t *testing.T) {
		for _, q := range []string{"", "?agentEndpoints=true"} {
			expectError(t, b.do("GET", "/v1/batches/"+bt.ID+q, nil), 404, "BATCH::NOT_FOUND")
		}
	})
	t.Run("a viewer reads the batch without endpoints", func(t *testing.T) {
		r := viewer.do("GET", "/v1/batches/"+bt.ID+"?agentEndpoints=true", nil)
		if r.Status != 200 {
			t.Fatalf("viewer's read: %d %s", r.Status, r.Body)
		}
		for _, m := range decodeBatch(t, r).Members {
			if m.AgentEndpoint != nil {
				t.Fatalf("a viewer (no sandbox.proxy) got member %s's agent endpoint", m.ID)
			}
		}
		expectError(t, viewer.do("GET", "/v1/batches/"+bt.ID+"?agentEndpoints=maybe", nil), 400, "SANDBOX::INVALID_PARAMETER")
	})
	t.Run("a cold member's endpoint comes with agentEndpoints once it runs", func(t *testing.T) {
		var ep *agent
		waitFor(t, 3*time.Minute, func() bool {
			for _, m := range decodeBatch(t, a.do("GET", "/v1/batches/"+bt.ID+"?agentEndpoints=true", nil)).Members {
				if m.ID == cold && m.AgentEndpoint != nil {
					ep = &agent{t: t, base: "http://" + m.AgentEndpoint.Endpoint, headers: m.AgentEndpoint.Headers, client: admin.client}
				}
			}
			return ep != nil
		}, "the cold member's agent endpoint")
		if out := stdoutOf(ep.run("echo $BATCH_ENV")); out != "bound" {
			t.Fatalf("cold member's command: %q", out)
		}
	})
	t.Run("the header dies with the key that read it", func(t *testing.T) {
		if r := admin.do("DELETE", "/v1/tenants/"+ta+"/keys/"+kaID, nil); r.Status != 204 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		if st, body := status(warm[0], "/ping"); st != 403 || !strings.Contains(body, "ACCESS::TOKEN_REVOKED") {
			t.Fatalf("after the key's revocation: %d %s, want 403 ACCESS::TOKEN_REVOKED", st, body)
		}
	})
	owner := admin.asKey(kOwner)
	if r := owner.do("DELETE", "/v1/batches/"+bt.ID, nil); r.Status != 204 {
		t.Fatalf("delete batch: %d %s", r.Status, r.Body)
	}
	owner.do("DELETE", "/v1/pools/ep", nil)
	b.do("DELETE", "/v1/sandboxes/"+stranger, nil)
	waitFor(t, time.Minute, func() bool { return len(e.containers()) == 0 }, "every container to go")
}
