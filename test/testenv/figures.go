package testenv

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"testing"
	"time"
)

// Figure is one line of bench/results.json: a hot-path figure beside its raw baseline
// measured in the same run and the target it is held to. Baseline is 0 when the figure
// has none (e.g. a count of API writes); Target is the bound as the docs state it
// ("<= 15", ">= 300").
type Figure struct {
	Name        string  `json:"name"`
	Unit        string  `json:"unit"`
	P50         float64 `json:"p50"`
	P99         float64 `json:"p99"`
	BaselineP50 float64 `json:"baseline_p50"`
	Target      string  `json:"target"`
}

var figuresMu sync.Mutex

// RecordFigure appends f to the JSON-lines file named by SANDGATE_BENCH_FIGURES (set by
// scripts/bench.sh, which turns the lines into bench/results.json and the table it
// prints). Without the variable it only logs the figure.
func RecordFigure(tb testing.TB, f Figure) {
	tb.Helper()
	tb.Logf("figure %s: p50 %.3f p99 %.3f %s (baseline p50 %.3f, target %s)", f.Name, f.P50, f.P99, f.Unit, f.BaselineP50, f.Target)
	path := os.Getenv("SANDGATE_BENCH_FIGURES")
	if path == "" {
		return
	}
	line, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	figuresMu.Lock()
	defer figuresMu.Unlock()
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		tb.Fatalf("bench figures: %v", err)
	}
	defer fh.Close()
	if _, err := fh.Write(append(line, '\n')); err != nil {
		tb.Fatalf("bench figures: %v", err)
	}
}

// Quantiles returns the p50 and p99 of ds in unit (time.Millisecond: milliseconds).
func Quantiles(ds []time.Duration, unit time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) float64 {
		i := int(p * float64(len(s)-1))
		return float64(s[i]) / float64(unit)
	}
	return q(0.50), q(0.99)
}
