// Package promtest reads series of Prometheus collectors the way a scrape does, for
// tests; only tests import it.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter is the value of counter name whose label is value, as a scrape of
// collectors reads it; 0 when there is no such series yet.
func Counter(t testing.TB, collectors []prometheus.Collector, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
