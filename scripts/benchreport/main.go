// Command benchreport turns the figures benchmarks recorded (testenv.RecordFigure: one
// JSON object a line, in the file $SANDGATE_BENCH_FIGURES) into bench/results.json (a
// JSON list of the same objects, the last one recorded under each name) and prints them
// as one table: each figure beside its baseline from the same run, the ratio, the
// target and whether the figure meets it.
//
// A target is one or more bounds separated by commas, each
//
//	[p99] <op> <number>[x]     op is <=, <, >=, > or =
//	[p99] <op> +<number>
//
// on the p50 (or the p99 when so prefixed): "<= 15" bounds the figure itself, "<= 1.2x"
// its ratio to the baseline, "<= +1" its excess over the baseline. A target it cannot
// read is shown with "?".
//
//	go run ./scripts/benchreport -in bench/figures.jsonl -out bench/results.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sandgate/sandgate/test/testenv"
)

func main() {
	in := flag.String("in", "bench/figures.jsonl", "figures recorded by the benchmarks (JSON lines)")
	out := flag.String("out", "bench/results.json", "where to write the results")
	flag.Parse()
	figs, err := readFigures(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	js, _ := json.MarshalIndent(figs, "", "  ")
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, append(js, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, figs)
	fmt.Printf("\n%d figures written to %s\n", len(figs), *out)
}

// readFigures reads the JSON lines at path; a name recorded twice keeps its last value
// at the place of its first.
func readFigures(path string) ([]testenv.Figure, error) {
	figs := []testenv.Figure{}
	fh, err := os.Open(path)
	if os.IsNotExist(err) {
		return figs, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	at := map[string]int{}
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var f testenv.Figure
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if i, ok := at[f.Name]; ok {
			figs[i] = f
			continue
		}
		at[f.Name] = len(figs)
		figs = append(figs, f)
	}
	return figs, sc.Err()
}

func printTable(w *os.File, figs []testenv.Figure) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tp50\tp99\tbaseline p50\tratio\ttarget\tmet\t")
	for _, f := range figs {
		base, ratio := "-", "-"
		if f.BaselineP50 != 0 {
			base = num(f.BaselineP50)
			ratio = fmt.Sprintf("%.2fx", f.P50/f.BaselineP50)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", f.Name, f.Unit, num(f.P50), num(f.P99), base, ratio, f.Target, meets(f))
	}
	tw.Flush()
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// meets evaluates f's target: "yes", "NO" or "?" (no target, or one it cannot read).
func meets(f testenv.Figure) string {
	if strings.TrimSpace(f.Target) == "" {
		return "?"
	}
	for _, part := range strings.Split(f.Target, ",") {
		ok, read := bound(f, strings.TrimSpace(part))
		if !read {
			return "?"
		}
		if !ok {
			return "NO"
		}
	}
	return "yes"
}

// bound evaluates one bound of a target (see the package doc).
func bound(f testenv.Figure, b string) (ok, read bool) {
	v := f.P50
	if rest, found := strings.CutPrefix(b, "p99"); found {
		v, b = f.P99, strings.TrimSpace(rest)
	} else if rest, found := strings.CutPrefix(b, "p50"); found {
		b = strings.TrimSpace(rest)
	}
	var op string
	for _, o := range []string{"<=", ">=", "==", "<", ">", "≤", "≥", "="} {
		if rest, found := strings.CutPrefix(b, o); found {
			op, b = o, strings.TrimSpace(rest)
			break
		}
	}
	if op == "" {
		return false, false
	}
	switch {
	case strings.HasSuffix(b, "x"):
		if f.BaselineP50 == 0 {
			return false, false
		}
		v, b = v/f.BaselineP50, strings.TrimSuffix(b, "x")
	case strings.HasPrefix(b, "+"):
		v, b = v-f.BaselineP50, strings.TrimPrefix(b, "+")
	}
	b = strings.TrimSpace(strings.TrimRightFunc(b, func(r rune) bool { return r == '%' || r == ' ' || (r > 'a' && r < 'z') || r == 'µ' }))
	limit, err := strconv.ParseFloat(b, 64)
	if err != nil {
		return false, false
	}
	switch op {
	case "<=", "≤":
		return v <= limit, true
	case ">=", "≥":
		return v >= limit, true
	case "==", "=":
		return v == limit, true
	case "<":
		return v < limit, true
	default:
		return v > limit, true
	}
}
