// Package deploy holds no code: only the Kubernetes manifests (the kustomize base in
// base/ and overlays/, the Helm chart in helm/sandgate), and these tests, which read them
// the way the API server would (strict decoding into the real API types) and check the
// promises their comments make, for the base and for the chart rendered with default and
// with other values alike: the gateway's RBAC is Pods (and little else) only in the
// sandbox namespace, its probes hit a route the gateway serves, and the NetworkPolicy
// admits only the gateway and never lets a sandbox reach private ranges.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

const (
	gatewayNamespace = "sandgate"
	sandboxNamespace = "sandgate-sandboxes"
)

// loadBase decodes every document of every file that base/kustomization.yaml lists,
// refusing unknown or duplicate fields as `kubectl apply --validate=strict` would.
func loadBase(t *testing.T) []runtime.Object {
	t.Helper()
	var kust struct {
		Resources []string `json:"resources"`
	}
	decodeYAML(t, "base/kustomization.yaml", &kust)
	files, err := filepath.Glob("base/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Every manifest in base/ is listed, so none is silently left out of an apply.
	for _, f := range files {
		if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(kust.Resources, name) {
			t.Errorf("base/%s is not in base/kustomization.yaml's resources", name)
		}
	}
	var objs []runtime.Object
	for _, name := range kust.Resources {
		data, err := os.ReadFile(filepath.Join("base", name))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, decodeStrictly(t, "base/"+name, data)...)
	}
	return objs
}

// decodeStrictly decodes every YAML document of data into its API type, refusing
// unknown or duplicate fields.
func decodeStrictly(t *testing.T, source string, data []byte) []runtime.Object {
	t.Helper()
	deserializer := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := deserializer.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v\n%s", source, err, doc)
		}
		objs = append(objs, obj)
	}
	return objs
}

// manifestSet is one way of deploying sandgate, as the objects it applies and what they
// must hold.
type manifestSet struct {
	name             string
	objs             []runtime.Object
	gatewayNamespace string
	sandboxNamespace string
	gatewayName      string
	replicas         int32
	// redisSecret is the Secret the gateway's SANDGATE_REDIS_URL comes from; empty: a
	// plain redis:// value (a bundled Redis, which has no password).
	redisSecret string
}

// manifestSets are the kustomize base and the Helm chart rendered with its defaults and
// with other values (helm_test.go).
func manifestSets(t *testing.T) []manifestSet {
	t.Helper()
	base := manifestSet{
		name: "kustomize base", objs: loadBase(t),
		gatewayNamespace: gatewayNamespace, sandboxNamespace: sandboxNamespace,
		gatewayName: "sandgate-gateway", replicas: 2,
	}
	return append([]manifestSet{base}, chartSets(t)...)
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := loadBase(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
	}
	for kind, n := range map[string]int{"Namespace": 2, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "Deployment": 2, "Service": 2, "NetworkPolicy": 2} {
		if kinds[kind] != n {
			t.Errorf("%d %s objects, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
}

// The gateway may touch Pods (and their logs) in the sandbox namespace and nothing else.
func TestGatewayRBACIsPodsOnlyInTheSandboxNamespace(t *testing.T) {
	for _, set := range manifestSets(t) {
		t.Run(set.name, func(t *testing.T) { checkGatewayRBAC(t, set) })
	}
}

func checkGatewayRBAC(t *testing.T, set manifestSet) {
	objs := set.objs
	var roles []*rbacv1.Role
	var bindings []*rbacv1.RoleBinding
	for _, o := range objs {
		switch v := o.(type) {
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			t.Errorf("cluster-wide RBAC object %T: the gateway needs none", v)
		case *rbacv1.Role:
			roles = append(roles, v)
		case *rbacv1.RoleBinding:
			bindings = append(bindings, v)
		}
	}
	if len(roles) != 1 || len(bindings) != 1 {
		t.Fatalf("%d Roles and %d RoleBindings, want one of each", len(roles), len(bindings))
	}
	role, binding := roles[0], bindings[0]
	if role.Namespace != set.sandboxNamespace {
		t.Errorf("Role in namespace %q, want %q", role.Namespace, set.sandboxNamespace)
	}
	allowed := map[string][]string{
		"pods":     {"get", "list", "watch", "create", "delete", "patch"},
		"pods/log": {"get"},
		"secrets":  {"create", "delete"},
		// pvc volumes: looked up by name, made, removed; never listed or watched.
		"persistentvolumeclaims": {"get", "create", "delete"},
	}
	granted := map[string]bool{}
	for _, rule := range role.Rules {
		if !slices.Equal(rule.APIGroups, []string{""}) || len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: want only the core API group, no resource names, no URLs", rule)
		}
		for _, res := range rule.Resources {
			verbs, ok := allowed[res]
			if !ok {
				t.Errorf("rule grants resource %q; the gateway needs only %v", res, keys(allowed))
				continue
			}
			for _, v := range rule.Verbs {
				if !slices.Contains(verbs, v) {
					t.Errorf("rule grants %q on %s; allowed: %v", v, res, verbs)
				}
				granted[res+" "+v] = true
			}
		}
	}
	// And everything the runtime does is granted (an informer needs list and watch).
	for res, verbs := range allowed {
		for _, v := range verbs {
			if !granted[res+" "+v] {
				t.Errorf("the Role lacks %q on %s", v, res)
			}
		}
	}
	if binding.Namespace != set.sandboxNamespace || binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding %s/%s refers to %s %q; want the Role %q in %s", binding.Namespace, binding.Name, binding.RoleRef.Kind, binding.RoleRef.Name, role.Name, set.sandboxNamespace)
	}
	dep := gatewayDeployment(t, set)
	want := rbacv1.Subject{Kind: "ServiceAccount", Name: dep.Spec.Template.Spec.ServiceAccountName, Namespace: dep.Namespace}
	if !slices.Equal(binding.Subjects, []rbacv1.Subject{want}) {
		t.Errorf("RoleBinding subjects %+v, want exactly the gateway's service account %+v", binding.Subjects, want)
	}
}

func TestGatewayDeployment(t *testing.T) {
	for _, set := range manifestSets(t) {
		t.Run(set.name, func(t *testing.T) { checkGatewayDeployment(t, set) })
	}
}

func checkGatewayDeployment(t *testing.T, set manifestSet) {
	dep := gatewayDeployment(t, set)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != set.replicas {
		t.Errorf("replicas %v, want %d", dep.Spec.Replicas, set.replicas)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["SANDGATE_RUNTIME"] != "kubernetes" || env["SANDGATE_NAMESPACE"] != set.sandboxNamespace {
		t.Errorf("SANDGATE_RUNTIME=%q SANDGATE_NAMESPACE=%q, want kubernetes and %s", env["SANDGATE_RUNTIME"], env["SANDGATE_NAMESPACE"], set.sandboxNamespace)
	}
	redisURL := envVar(c, "SANDGATE_REDIS_URL")
	switch {
	case redisURL == nil:
		t.Errorf("no SANDGATE_REDIS_URL")
	case set.redisSecret == "" && !strings.HasPrefix(redisURL.Value, "redis://"):
		t.Errorf("SANDGATE_REDIS_URL=%q, want the bundled Redis's redis:// URL", redisURL.Value)
	case set.redisSecret != "" && (redisURL.Value != "" || redisURL.ValueFrom == nil || redisURL.ValueFrom.SecretKeyRef == nil || redisURL.ValueFrom.SecretKeyRef.Name != set.redisSecret):
		t.Errorf("SANDGATE_REDIS_URL %+v, want it from the Secret %s and no plain value", redisURL, set.redisSecret)
	}
	// Both probes must hit a public GET route the gateway serves (its OpenAPI document
	// lists every route, under the /v1 server and the root).
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	data, err := os.ReadFile("../gateway/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe is not an HTTP GET", name)
			continue
		}
		path := strings.TrimPrefix(p.HTTPGet.Path, "/v1")
		if _, ok := spec.Paths[path]["get"]; !ok {
			t.Errorf("%s probe path %s: no GET %s in gateway/api/openapi.json", name, p.HTTPGet.Path, path)
		}
		if p.HTTPGet.Port.StrVal != "http" || c.Ports[0].Name != "http" {
			t.Errorf("%s probe port %v, want the container's named port http", name, p.HTTPGet.Port)
		}
	}
}

// Sandboxes accept traffic only from gateway pods and never send it to a private,
// link-local or loopback address.
func TestSandboxNetworkPolicy(t *testing.T) {
	for _, set := range manifestSets(t) {
		t.Run(set.name, func(t *testing.T) { checkSandboxNetworkPolicy(t, set) })
	}
}

func checkSandboxNetworkPolicy(t *testing.T, set manifestSet) {
	dep := gatewayDeployment(t, set)
	var np *networkingv1.NetworkPolicy
	for _, o := range set.objs {
		if v, ok := o.(*networkingv1.NetworkPolicy); ok && v.Namespace == set.sandboxNamespace {
			np = v
		}
	}
	if np == nil {
		t.Fatalf("no NetworkPolicy in %s", set.sandboxNamespace)
	}
	if len(np.Spec.PodSelector.MatchLabels)+len(np.Spec.PodSelector.MatchExpressions) != 0 {
		t.Errorf("podSelector %+v: want {} (every pod in the namespace)", np.Spec.PodSelector)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("policyTypes %v: want Ingress and Egress", np.Spec.PolicyTypes)
	}
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.IPBlock != nil || peer.PodSelector == nil || peer.NamespaceSelector == nil {
				t.Errorf("ingress peer %+v: want only gateway pods (namespace and pod selector)", peer)
				continue
			}
			if peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != dep.Namespace {
				t.Errorf("ingress namespaceSelector %+v does not select %s", peer.NamespaceSelector, dep.Namespace)
			}
			for k, v := range peer.PodSelector.MatchLabels {
				if dep.Spec.Template.Labels[k] != v {
					t.Errorf("ingress podSelector %s=%s does not match the gateway pods' labels %v", k, v, dep.Spec.Template.Labels)
				}
			}
			if len(peer.PodSelector.MatchLabels) == 0 {
				t.Errorf("ingress podSelector selects every pod of %s", dep.Namespace)
			}
		}
	}
	mustExclude := []string{"10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254", "127.0.0.1", "100.64.0.1", "fd00::1", "fe80::1", "::1"}
	for _, rule := range np.Spec.Egress {
		for _, peer := range rule.To {
			if peer.IPBlock == nil {
				continue
			}
			cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			if err != nil {
				t.Fatalf("ipBlock %q: %v", peer.IPBlock.CIDR, err)
			}
			for _, a := range mustExclude {
				addr := netip.MustParseAddr(a)
				if !cidr.Contains(addr) {
					continue
				}
				excluded := false
				for _, e := range peer.IPBlock.Except {
					p, err := netip.ParsePrefix(e)
					if err != nil {
						t.Fatalf("except %q: %v", e, err)
					}
					excluded = excluded || p.Contains(addr)
				}
				if !excluded {
					t.Errorf("egress ipBlock %s lets sandboxes reach %s", peer.IPBlock.CIDR, a)
				}
			}
		}
	}
}

func gatewayDeployment(t *testing.T, set manifestSet) *appsv1.Deployment {
	t.Helper()
	for _, o := range set.objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == set.gatewayName {
			if d.Namespace != set.gatewayNamespace {
				t.Errorf("gateway Deployment in %q, want %q", d.Namespace, set.gatewayNamespace)
			}
			return d
		}
	}
	t.Fatalf("no %s Deployment", set.gatewayName)
	return nil
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func decodeYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
