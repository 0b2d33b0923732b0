package docker

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// countingEngineProxy is a reverse proxy on a unix socket of the test's own in front of
// the real engine's socket: the real engine answers every call, and the proxy counts
// them by kind, so that a test can tell how many engine calls a runtime's work made.
type countingEngineProxy struct {
	socket string
	mu     sync.Mutex
	calls  map[string]int
}

// engineCallKinds name the calls a test counts, by method and path (after the API
// version prefix).
var engineCallKinds = []struct {
	kind   string
	method string
	path   *regexp.Regexp
}{
	{"list", http.MethodGet, regexp.MustCompile(`^/containers/json$`)},
	{"inspect", http.MethodGet, regexp.MustCompile(`^/containers/[^/]+/json$`)},
	{"holder-stats", http.MethodGet, regexp.MustCompile(`^/containers/sandgate-[^/]+-net/stats$`)},
	{"stats", http.MethodGet, regexp.MustCompile(`^/containers/[^/]+/stats$`)},
	{"stat-path", http.MethodHead, regexp.MustCompile(`^/containers/[^/]+/archive$`)},
}

var apiVersionPrefix = regexp.MustCompile(`^/v[0-9.]+`)

// startCountingEngineProxy serves the proxy until the test ends.
func startCountingEngineProxy(t *testing.T) *countingEngineProxy {
	t.Helper()
	engine := "/var/run/docker.sock"
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		path, ok := strings.CutPrefix(host, "unix://")
		if !ok {
			t.Skipf("DOCKER_HOST %s is not a unix socket", host)
		}
		engine = path
	}
	p := &countingEngineProxy{socket: filepath.Join(t.TempDir(), "engine.sock"), calls: map[string]int{}}
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	toEngine := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", engine)
	}}
	forward := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "docker"}) },
		Transport: toEngine,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p.count(req)
		forward.ServeHTTP(w, req)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		toEngine.CloseIdleConnections()
	})
	return p
}

func (p *countingEngineProxy) count(req *http.Request) {
	path := apiVersionPrefix.ReplaceAllString(req.URL.Path, "")
	kind := "other"
	for _, k := range engineCallKinds {
		if req.Method == k.method && k.path.MatchString(path) {
			kind = k.kind
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[kind]++
	p.calls["all"]++
}

// take returns the calls counted since the last take and starts counting anew.
func (p *countingEngineProxy) take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	got := p.calls
	p.calls = map[string]int{}
	return got
}

// TestEngineCallsOfAReconcilePassAndAUsageSample: a reconcile pass's reads (List, then
// MissingEnforcers on what it listed) make one container list whatever the number of
// sandboxes, and still name a sandbox whose enforcer was killed; a usage sample makes
// one stats call per sandbox (two for one in a holder's namespace, whose traffic the
// engine counts on the holder) and, after a sandbox's first reading, no inspect.
func TestEngineCallsOfAReconcilePassAndAUsageSample(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	proxy := startCountingEngineProxy(t)
	// The counted runtime reads what r made, on the same network, through the proxy.
	counted := testRuntimeOn(t, Options{Host: "unix://" + proxy.socket, Network: r.opts.Network, Spares: -1, NoAntiSpoof: true})

	// Two sandboxes behind an enforcer, the first in a spare holder's namespace, and two
	// without one.
	waitSpare(t, r)
	var ids []string
	inHolder := map[string]bool{}
	for i := range 4 {
		spec := enforcedSpec(t, r, image, `{"defaultAction":"deny"}`)
		if i >= 2 {
			spec.Egress, spec.EgressToken = nil, ""
		}
		if _, err := r.Create(ctx, spec); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		ids = append(ids, spec.ID)
		if err := exec.Command("docker", "inspect", holderName(spec.ID)).Run(); err == nil {
			inHolder[spec.ID] = true
		}
	}
	if !inHolder[ids[0]] {
		t.Fatalf("the first enforced sandbox is not in a holder's namespace")
	}
	killed := ids[1]
	killEnforcerForGood(t, r, killed)

	proxy.take()
	listed, err := counted.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := counted.MissingEnforcers(ctx, listed)
	if err != nil {
		t.Fatal(err)
	}
	pass := proxy.take()
	var ours []string
	for _, id := range missing {
		if slices.Contains(ids, id) {
			ours = append(ours, id)
		}
	}
	if !slices.Equal(ours, []string{killed}) {
		t.Fatalf("MissingEnforcers named %v of the test's sandboxes, want only %s (its enforcer killed)", ours, killed)
	}
	if pass["list"] != 1 || pass["all"] != 1 {
		t.Errorf("a reconcile pass's List and MissingEnforcers of %d sandboxes made %v engine calls, want 1 list and nothing else", len(listed), pass)
	}

	sample := func(withDisk bool) (map[string]runtimes.Usage, map[string]int) {
		t.Helper()
		readings := map[string]runtimes.Usage{}
		for _, id := range ids {
			u, err := counted.Usage(ctx, id, withDisk)
			if err != nil {
				t.Fatalf("usage of %s: %v", id, err)
			}
			readings[id] = u
		}
		return readings, proxy.take()
	}
	// Whether this engine's stats of a workload in a holder's namespace show its network
	// (then the holder's stats are not needed): the engine answers for itself.
	wantHolderStats := 0
	for id := range inHolder {
		res, err := r.cli.ContainerStats(ctx, containerName(id), client.ContainerStatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var st container.StatsResponse
		err = json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Networks) == 0 {
			wantHolderStats++
		}
	}
	t.Logf("%d sandboxes, %d in a holder's namespace, %d of them without network counters of their own", len(ids), len(inHolder), wantHolderStats)
	first, firstCalls := sample(true)
	if firstCalls["stats"] != len(ids) || firstCalls["holder-stats"] != wantHolderStats || firstCalls["inspect"] > len(ids) {
		t.Errorf("a first usage sample (with disk) made %v engine calls, want %d stats, %d of holders and at most %d inspects",
			firstCalls, len(ids), wantHolderStats, len(ids))
	}
	for range 2 {
		later, calls := sample(false)
		if calls["stats"] != len(ids) || calls["holder-stats"] != wantHolderStats || calls["all"] != len(ids)+wantHolderStats {
			t.Errorf("a later usage sample made %v engine calls, want %d stats, %d of holders and nothing else",
				calls, len(ids), wantHolderStats)
		}
		for _, id := range ids {
			u, f := later[id], first[id]
			if u.CPULimit != f.CPULimit || u.CPULimit != 1 || !u.NetKnown || !u.PidsKnown || u.MemoryLimitBytes == 0 {
				t.Errorf("later reading of %s: %+v; first reading %+v", id, u, f)
			}
			if !f.DiskKnown || u.DiskKnown {
				t.Errorf("%s: disk known %t in the reading with disk, %t in one without", id, f.DiskKnown, u.DiskKnown)
			}
		}
	}

	// What a sandbox's first reading learnt goes with the sandbox: at its Delete, or at
	// the first List without it (deleted through another runtime, another gateway's).
	gone := ids[3]
	if err := counted.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, kept := counted.usage.get(gone); kept {
		t.Errorf("the usage facts of %s outlive its Delete", gone)
	}
	if _, err := counted.Usage(ctx, gone, false); !errors.Is(err, runtimes.ErrNotFound) {
		t.Fatalf("usage of a deleted sandbox: %v, want not found", err)
	}
	goneElsewhere := ids[2]
	if err := r.Delete(ctx, goneElsewhere); err != nil {
		t.Fatal(err)
	}
	if _, kept := counted.usage.get(goneElsewhere); !kept {
		t.Fatalf("no usage facts of %s before the List", goneElsewhere)
	}
	if _, err := counted.List(ctx); err != nil {
		t.Fatal(err)
	}
	if _, kept := counted.usage.get(goneElsewhere); kept {
		t.Errorf("the usage facts of %s outlive a List without it", goneElsewhere)
	}
	if _, kept := counted.usage.get(ids[0]); !kept {
		t.Errorf("the usage facts of %s, still listed, were dropped", ids[0])
	}
}
