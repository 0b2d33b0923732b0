package docker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/testenv"
)

func TestPlatformAddr(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("203.0.113.7")}
	tests := []struct {
		addr     string
		platform bool
	}{
		{"127.0.0.1", true}, {"127.8.9.10", true}, {"::1", true}, {"::ffff:127.0.0.1", true},
		{"0.0.0.0", true}, {"::", true},
		{"169.254.169.254", true}, {"fe80::1", true},
		{"10.1.2.3", true}, {"172.17.0.1", true}, {"192.168.1.1", true}, {"fd00::1", true},
		{"100.64.0.1", true}, {"224.0.0.1", true},
		{"203.0.113.7", true}, // the host's own
		{"8.8.8.8", false}, {"140.82.112.3", false}, {"2606:4700::1111", false}, {"203.0.113.8", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := platformAddr(netip.MustParseAddr(tt.addr), own); got != tt.platform {
				t.Fatalf("platformAddr(%s) = %t, want %t", tt.addr, got, tt.platform)
			}
		})
	}
}

// fixedReasons are every reason a failed pull may answer.
var fixedReasons = []string{runtimes.PullReasonUnauthorized, runtimes.PullReasonDenied, runtimes.PullReasonNotFound, runtimes.PullReasonInvalidName, runtimes.PullReasonNoPlatform, runtimes.PullReasonUnreachable, runtimes.PullReasonBadAnswer}

func isFixedReason(s string) bool {
	for _, r := range fixedReasons {
		if s == r {
			return true
		}
	}
	return false
}

// countingListener accepts on loopback and counts the connections it is offered,
// answering each with handler.
func countingListener(t *testing.T, handler http.Handler) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &http.Server{Handler: handler, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), &n
}

// TestPullRefusesPlatformHosts: a pull naming a registry on loopback, "localhost" or an
// address of the host is refused before the engine is asked (the listener there sees no
// connection), unless the operator listed the registry. A listed registry that answers
// garbage, or redirects to a listener serving metrics, is answered with one of the fixed
// reasons: nothing of what was answered reaches the caller.
func TestPullRefusesPlatformHosts(t *testing.T) {
	r, _ := testRuntime(t)
	ctx := context.Background()
	marker := "metric_" + testenv.RandomHex(4)
	metrics, _ := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# HELP " + marker + " a platform secret\n" + marker + " 1\n"))
	}))
	registry, seen := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.Redirect(w, req, "http://"+metrics+"/metrics", http.StatusTemporaryRedirect)
	}))
	_, port, _ := net.SplitHostPort(registry)

	refused := []string{registry, "localhost:" + port, "LOCALHOST:" + port, "[::1]:" + port}
	for _, a := range hostAddrs() {
		if !a.IsLoopback() && a.Is4() {
			refused = append(refused, net.JoinHostPort(a.String(), port))
			break
		}
	}
	for _, reg := range refused {
		image := reg + "/team/app:1"
		err := r.Pull(ctx, image, &runtimes.ImageAuth{Username: "u", Password: "p"}, nil)
		var rr *runtimes.RegistryRefusedError
		if !errors.As(err, &rr) || rr.Registry != reg {
			t.Errorf("pull %s: %v, want it refused for its registry", image, err)
		}
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("the registry listener saw %d connections from refused pulls", n)
	}
	if got := r.PullCount(); got != 0 {
		t.Fatalf("%d engine pulls started for refused registries", got)
	}

	r.opts.ImageRegistries = []string{registry}
	err := r.Pull(ctx, registry+"/team/app:1", nil, nil)
	var pe *runtimes.PullError
	if !errors.As(err, &pe) {
		t.Fatalf("pull from the listed registry: %v, want a PullError", err)
	}
	if seen.Load() == 0 {
		t.Fatal("the listed registry was not asked")
	}
	if !isFixedReason(pe.Reason) || strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "#") {
		t.Fatalf("pull answer %q is not one of the fixed reasons", err)
	}
}
