package metrics

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestGrafanaDashboardNamesKnownSeries fails when deploy/grafana/sandgate.json queries
// a sandgate_ series that no collector here describes (renamed or never made).
func TestGrafanaDashboardNamesKnownSeries(t *testing.T) {
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range New().Collectors() {
			c.Describe(ch)
		}
		NewFleetCollector(func(context.Context) (Fleet, error) { return Fleet{}, nil }, FleetOptions{TenantLabel: true}).Describe(ch)
		NewEnforcerRestarts(func() uint64 { return 0 }).Describe(ch)
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			known[m[1]] = true
		}
	}
	raw, err := os.ReadFile("../../deploy/grafana/sandgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	series := regexp.MustCompile(`sandgate_[a-z_]+`)
	used := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range series.FindAllString(tg.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if !known[base] {
					t.Errorf("panel %q queries %s, which no collector describes", p.Title, name)
				}
				used++
			}
		}
	}
	if used == 0 {
		t.Fatal("the dashboard queries no sandgate_ series")
	}
	for name := range known {
		if !strings.Contains(string(raw), name) {
			t.Errorf("series %s is on no panel of the dashboard", name)
		}
	}
}

func TestStatusClass(t *testing.T) {
	for status, want := range map[int]string{200: "2xx", 101: "1xx", 404: "4xx", 502: "5xx", 0: "other", 999: "other", 600: "other"} {
		if got := StatusClass(status); got != want {
			t.Errorf("StatusClass(%d) = %q, want %q", status, got, want)
		}
	}
}

// TestProxiedCountsBySeries: each proxied request counts in the series of its kind and
// status class, and its bytes in its kind's, however often a series is used.
func TestProxiedCountsBySeries(t *testing.T) {
	s := New()
	for i := 0; i < 3; i++ {
		s.Proxied(false, 200, 10)
	}
	s.Proxied(false, 204, 0)
	s.Proxied(true, 503, 7)
	s.Proxied(false, 42, 1)
	s.Proxied(true, 200, 0)
	want := map[string]float64{
		"proxied 2xx preview": 4, "proxied 5xx agent": 1, "proxied other preview": 1, "proxied 2xx agent": 1, // labels by name: class, kind
		"bytes preview": 31, "bytes agent": 7,
	}
	got := map[string]float64{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.proxied, s.proxiedBytes)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := "proxied"
			if strings.HasSuffix(f.GetName(), "bytes_total") {
				name = "bytes"
			}
			for _, l := range m.GetLabel() {
				name += " " + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue()
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
