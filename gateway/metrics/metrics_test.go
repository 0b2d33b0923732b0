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
