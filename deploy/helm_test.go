package deploy

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden renders of testdata/helm")

const (
	chartDir         = "helm/sandgate"
	otherValues      = "testdata/helm/other-values.yaml"
	otherRelease     = "acme"
	otherNamespace   = "acme-sg"
	otherSandboxNS   = "acme-boxes"
	otherGatewayName = "acme-sandgate-gateway"
)

var helmBuild struct {
	once sync.Once
	path string
	err  error
}

// helmCommand runs the Helm that scripts/helm.sh builds from the module proxy (cached
// outside the repository; `make helm` builds it ahead), with its config, cache and data
// in a temp dir so nothing of the machine's Helm setup applies. It returns stdout and the
// combined error output.
func helmCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helmBuild.once.Do(func() {
		out, err := exec.Command("../scripts/helm.sh", "build").Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			helmBuild.err = fmt.Errorf("scripts/helm.sh build: %v\n%s", err, stderr)
			return
		}
		helmBuild.path = strings.TrimSpace(string(out))
	})
	if helmBuild.err != nil {
		t.Fatal(helmBuild.err)
	}
	home := t.TempDir()
	cmd := exec.Command(helmBuild.path, args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache", "HELM_DATA_HOME="+home+"/data", "KUBECONFIG="+home+"/no-kubeconfig")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// renderChart is `helm template` of the chart as release in namespace, with extra args
// (-f, --set).
func renderChart(t *testing.T, release, namespace string, extra ...string) string {
	t.Helper()
	out, err := helmCommand(t, append([]string{"template", release, chartDir, "--namespace", namespace}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chartSets are the chart rendered with its defaults (as release sandgate in namespace
// sandgate, the names the kustomize base uses) and with testdata/helm/other-values.yaml.
func chartSets(t *testing.T) []manifestSet {
	t.Helper()
	return []manifestSet{
		{
			name: "chart defaults", objs: decodeStrictly(t, "helm template (defaults)", []byte(renderChart(t, "sandgate", gatewayNamespace))),
			gatewayNamespace: gatewayNamespace, sandboxNamespace: sandboxNamespace,
			gatewayName: "sandgate-gateway", replicas: 2,
		},
		{
			name: "chart other values", objs: decodeStrictly(t, "helm template (other values)", []byte(renderChart(t, otherRelease, otherNamespace, "-f", otherValues))),
			gatewayNamespace: otherNamespace, sandboxNamespace: otherSandboxNS,
			gatewayName: otherGatewayName, replicas: 3, redisSecret: "acme-redis",
		},
	}
}

func TestHelmLint(t *testing.T) {
	for name, args := range map[string][]string{"defaults": nil, "other values": {"-f", otherValues}} {
		t.Run(name, func(t *testing.T) {
			if out, err := helmCommand(t, append([]string{"lint", "--strict", chartDir, "--namespace", "sandgate"}, args...)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// The chart with its defaults applies what the kustomize base applies: the same kinds,
// the same Role, and the same gateway pod spec, but for the names the release gives.
// Only the release's own namespace is missing: `helm install --create-namespace` makes it.
func TestHelmChartMatchesTheBase(t *testing.T) {
	base := loadBase(t)
	chart := chartSets(t)[0].objs
	count := func(objs []runtime.Object) map[string]int {
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.GetObjectKind().GroupVersionKind().Kind]++
		}
		return kinds
	}
	want := count(base)
	want["Namespace"]--
	if diff := cmp.Diff(want, count(chart)); diff != "" {
		t.Errorf("kinds (-base +chart):\n%s", diff)
	}
	for _, o := range chart {
		if ns, ok := o.(*corev1.Namespace); ok && ns.Name != sandboxNamespace {
			t.Errorf("the chart makes namespace %s; it makes only the sandbox namespace", ns.Name)
		}
	}

	if diff := cmp.Diff(onlyRole(t, base).Rules, onlyRole(t, chart).Rules); diff != "" {
		t.Errorf("Role rules (-base +chart):\n%s", diff)
	}

	baseSpec := gatewayDeployment(t, manifestSet{objs: base, gatewayName: "sandgate-gateway", gatewayNamespace: gatewayNamespace}).Spec.Template.Spec
	chartSpec := gatewayDeployment(t, manifestSet{objs: chart, gatewayName: "sandgate-gateway", gatewayNamespace: gatewayNamespace}).Spec.Template.Spec
	// What the release names differently: the bundled Redis's Service, the pods' labels
	// (the chart's carry the release too), and the pull policy the chart states.
	envVar(baseSpec.Containers[0], "SANDGATE_REDIS_URL").Value = "redis://sandgate-redis:6379"
	baseSpec.TopologySpreadConstraints[0].LabelSelector.MatchLabels["app.kubernetes.io/instance"] = "sandgate"
	baseSpec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	if diff := cmp.Diff(baseSpec, chartSpec); diff != "" {
		t.Errorf("gateway pod spec (-base +chart):\n%s", diff)
	}
}

func onlyRole(t *testing.T, objs []runtime.Object) *rbacv1.Role {
	t.Helper()
	var roles []*rbacv1.Role
	for _, o := range objs {
		if r, ok := o.(*rbacv1.Role); ok {
			roles = append(roles, r)
		}
	}
	if len(roles) != 1 {
		t.Fatalf("%d Roles, want 1", len(roles))
	}
	return roles[0]
}

// Every value of testdata/helm/other-values.yaml lands where it should.
func TestHelmValues(t *testing.T) {
	set := chartSets(t)[1]
	dep := gatewayDeployment(t, set)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "registry.example.com/sandgate/gateway:1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s (%s)", c.Image, c.ImagePullPolicy)
	}
	if !slices.Equal(pod.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("imagePullSecrets %v", pod.ImagePullSecrets)
	}
	if pod.NodeSelector["pool"] != "gateways" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" {
		t.Errorf("nodeSelector %v tolerations %v", pod.NodeSelector, pod.Tolerations)
	}
	if pod.ServiceAccountName != otherGatewayName {
		t.Errorf("serviceAccountName %s", pod.ServiceAccountName)
	}
	for name, want := range map[string]string{
		"SANDGATE_K8S_AGENT_IMAGE": "registry.example.com/sandgate/agent:1.2.3",
		"SANDGATE_CLUSTER_ID":      "acme-prod",
		"SANDGATE_LOG_LEVEL":       "debug",
		"SANDGATE_DEFAULT_TIMEOUT": "30m",
	} {
		if e := envVar(c, name); e == nil || e.Value != want {
			t.Errorf("%s = %+v, want %q", name, e, want)
		}
	}
	for name, want := range map[string]corev1.SecretKeySelector{
		"SANDGATE_API_KEY":           {LocalObjectReference: corev1.LocalObjectReference{Name: "acme-admin"}, Key: "key", Optional: new(true)},
		"SANDGATE_REDIS_URL":         {LocalObjectReference: corev1.LocalObjectReference{Name: "acme-redis"}, Key: "redis-url"},
		"SANDGATE_VAULT_UPSTREAM_CA": {LocalObjectReference: corev1.LocalObjectReference{Name: "vault-ca"}, Key: "ca.pem"},
	} {
		e := envVar(c, name)
		if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || !reflect.DeepEqual(*e.ValueFrom.SecretKeyRef, want) {
			t.Errorf("%s = %+v, want only a reference to %+v", name, e, want)
		}
	}
	if got := c.Resources.Requests.Cpu().String() + " " + c.Resources.Requests.Memory().String() + " " + c.Resources.Limits.Memory().String(); got != "2 1Gi 4Gi" {
		t.Errorf("resources %s", got)
	}
	if len(c.Ports) != 2 || c.Ports[1].Name != "metrics" || c.Ports[1].ContainerPort != 9102 {
		t.Errorf("container ports %+v, want http and metrics 9102", c.Ports)
	}
	if e := envVar(c, "SANDGATE_METRICS_LISTEN"); e == nil || e.Value != ":9102" {
		t.Errorf("SANDGATE_METRICS_LISTEN %+v, want :9102", e)
	}
	var svc *corev1.Service
	var pdb *policyv1.PodDisruptionBudget
	var np *networkingv1.NetworkPolicy
	var dashboard *corev1.ConfigMap
	for _, o := range set.objs {
		switch v := o.(type) {
		case *corev1.ConfigMap:
			dashboard = v
		case *corev1.Namespace:
			t.Errorf("namespace %s made with sandboxNamespace.create=false", v.Name)
		case *appsv1.Deployment:
			if v.Name != otherGatewayName {
				t.Errorf("Deployment %s besides the gateway with redis.bundled=false", v.Name)
			}
		case *corev1.Service:
			svc = v
		case *policyv1.PodDisruptionBudget:
			pdb = v
		case *networkingv1.NetworkPolicy:
			if np != nil {
				t.Errorf("NetworkPolicy %s besides %s: with redis.bundled=false only the sandboxes' is made", v.Name, np.Name)
			}
			np = v
		}
	}
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Ports[0].Port != 8443 ||
		len(svc.Spec.Ports) != 2 || svc.Spec.Ports[1].Name != "metrics" || svc.Spec.Ports[1].TargetPort.StrVal != "metrics" {
		t.Errorf("Service %+v", svc)
	}
	grafana, err := os.ReadFile("grafana/sandgate.json")
	if err != nil {
		t.Fatal(err)
	}
	if dashboard == nil || dashboard.Labels["grafana_dashboard"] != "1" || dashboard.Labels["team"] != "platform" {
		t.Fatalf("dashboard ConfigMap %+v", dashboard)
	}
	if got := dashboard.Data["sandgate.json"]; got != strings.TrimSuffix(string(grafana), "\n") {
		t.Errorf("the dashboard ConfigMap's sandgate.json is not deploy/grafana/sandgate.json (the chart keeps a copy in helm/sandgate/dashboards: copy it again)")
	}
	if pdb == nil || pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("PodDisruptionBudget %+v", pdb)
	}
	if np == nil || np.Namespace != otherSandboxNS {
		t.Fatalf("NetworkPolicy %+v, want one in %s", np, otherSandboxNS)
	}
	dns := np.Spec.Egress[0].To[0]
	if dns.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "dns" || !reflect.DeepEqual(dns.PodSelector.MatchLabels, map[string]string{"app": "coredns"}) {
		t.Errorf("DNS peer %+v", dns)
	}
	v4, v6 := np.Spec.Egress[1].To[0].IPBlock, np.Spec.Egress[1].To[1].IPBlock
	if !slices.Contains(v4.Except, "198.51.100.0/24") || slices.Contains(v4.Except, "2001:db8::/32") ||
		!slices.Contains(v6.Except, "2001:db8::/32") || slices.Contains(v6.Except, "198.51.100.0/24") {
		t.Errorf("extraExcept not split by family: v4 %v v6 %v", v4.Except, v6.Except)
	}
}

func TestHelmOptionalObjects(t *testing.T) {
	objs := decodeStrictly(t, "helm template", []byte(renderChart(t, "sandgate", gatewayNamespace,
		"--set", "networkPolicy.enabled=false", "--set", "podDisruptionBudget.enabled=false")))
	for _, o := range objs {
		switch v := o.(type) {
		case *networkingv1.NetworkPolicy, *policyv1.PodDisruptionBudget:
			t.Errorf("%T %v rendered although disabled", v, v)
		}
	}
}

// A secret never enters the chart's values or its output: the chart takes the Redis URL
// and the admin key only as Secret references, refuses them (and anything it does not
// know) as plain values, and renders no Secret of its own.
func TestHelmKeepsSecretsOutOfValues(t *testing.T) {
	const canary = "hunter2-canary"
	for _, tt := range []struct {
		name string
		set  string
		want string // in helm's error
	}{
		{"redis url as a value", "redis.url=redis://:" + canary + "@redis:6379", "additional properties 'url' not allowed"},
		{"redis password as a value", "redis.password=" + canary, "additional properties 'password' not allowed"},
		{"api key as a value", "apiKey.value=" + canary, "additional properties 'value' not allowed"},
		{"api key as a setting", "settings.SANDGATE_API_KEY=" + canary, "the chart sets SANDGATE_API_KEY itself"},
		{"redis url as a setting", "settings.SANDGATE_REDIS_URL=redis://:" + canary + "@r:6379", "the chart sets SANDGATE_REDIS_URL itself"},
		{"an unknown top-level value", "extraEnv=" + canary, "additional properties 'extraEnv' not allowed"},
		{"a setting that is not SANDGATE_", "settings.FOO=" + canary, "FOO"},
		{"external redis without its Secret", "redis.bundled=false", "redis.existingSecret must name the Secret"},
		{"sandboxes in the gateway's namespace", "sandboxNamespace.name=sandgate", "must differ from the release's namespace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := helmCommand(t, "template", "sandgate", chartDir, "--namespace", gatewayNamespace, "--set", tt.set)
			if err == nil {
				t.Fatalf("rendered with --set %s", tt.set)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %q", err, tt.want)
			}
			if strings.Contains(out, canary) {
				t.Errorf("the output holds the secret:\n%s", out)
			}
		})
	}
	for _, set := range chartSets(t) {
		for _, o := range set.objs {
			if s, ok := o.(*corev1.Secret); ok {
				t.Errorf("%s: renders Secret %s; the chart only refers to Secrets", set.name, s.Name)
			}
		}
	}
}

// The renders of the defaults and of other-values.yaml, kept as golden files so a change
// to the chart's output is seen in review (`go test ./deploy -run Golden -update`).
func TestHelmTemplateGolden(t *testing.T) {
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"testdata/helm/defaults.golden.yaml", []string{"sandgate", "--namespace", gatewayNamespace}},
		{"testdata/helm/other-values.golden.yaml", []string{otherRelease, "--namespace", otherNamespace, "-f", otherValues}},
	} {
		t.Run(filepath.Base(tt.golden), func(t *testing.T) {
			got := renderChart(t, tt.args[0], tt.args[2], tt.args[3:]...)
			if *update {
				if err := os.WriteFile(tt.golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(tt.golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("helm template differs from %s (-want +got; -update rewrites it):\n%s", tt.golden, diff)
			}
		})
	}
}

// The chart installs the images of the version it ships with.
func TestHelmChartAppVersionIsTheProducts(t *testing.T) {
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	decodeYAML(t, filepath.Join(chartDir, "Chart.yaml"), &chart)
	version, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(version)); chart.AppVersion != want {
		t.Errorf("Chart.yaml appVersion %q, want VERSION's %q", chart.AppVersion, want)
	}
}

// The ServiceMonitor scrapes the gateway Service's metrics port. Its kind is the
// Prometheus Operator's, not in client-go's scheme, so it is decoded strictly into the
// fields the chart sets.
func TestHelmServiceMonitor(t *testing.T) {
	type serviceMonitor struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       struct {
			Selector          metav1.LabelSelector `json:"selector"`
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Endpoints []struct {
				Port     string `json:"port"`
				Path     string `json:"path"`
				Interval string `json:"interval"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	args := []string{"--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom"}
	out := renderChart(t, "sandgate", gatewayNamespace, append(args, "--show-only", "templates/servicemonitor.yaml")...)
	var sm serviceMonitor
	if err := sigsyaml.UnmarshalStrict([]byte(stripComments([]byte(out))), &sm); err != nil {
		t.Fatalf("ServiceMonitor: %v\n%s", err, out)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" || sm.Metadata.Namespace != gatewayNamespace || sm.Metadata.Labels["release"] != "prom" {
		t.Errorf("ServiceMonitor %+v", sm)
	}
	var svc *corev1.Service
	for _, o := range decodeStrictly(t, "helm template", []byte(renderChart(t, "sandgate", gatewayNamespace, "--set", "metrics.enabled=true"))) {
		if v, ok := o.(*corev1.Service); ok && v.Name == "sandgate-gateway" {
			svc = v
		}
	}
	if svc == nil {
		t.Fatal("no gateway Service")
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the gateway Service's labels are %v", k, v, svc.Labels)
		}
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 || !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{gatewayNamespace}) {
		t.Errorf("ServiceMonitor selector %+v namespaces %v", sm.Spec.Selector, sm.Spec.NamespaceSelector.MatchNames)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
		t.Errorf("ServiceMonitor endpoints %+v; Service ports %+v", sm.Spec.Endpoints, svc.Spec.Ports)
	}
	if _, err := helmCommand(t, "template", "sandgate", chartDir, "--namespace", gatewayNamespace, "--set", "metrics.serviceMonitor.enabled=true"); err == nil || !strings.Contains(err.Error(), "needs metrics.enabled") {
		t.Errorf("a ServiceMonitor without the metrics port: %v, want refused", err)
	}
}
