// Command testreport reads `go test -json` on its standard input and prints what a
// plain `go test` run would: each package's result line (`ok`, `FAIL`, `?`), build
// errors, and the whole output of every test that failed; the output of a test that
// passed is dropped. A package that fails with tests still running (a panic, a timeout)
// has their output printed too, so nothing that explains a failure is lost.
//
// It also writes every test's time to -times (tab-separated: seconds, package, test;
// subtests included) and, at the end, prints the -slowest top-level tests, so that a
// run's log shows where its time went:
//
//	go test -json ./... | go run ./scripts/testreport -times test/e2e/artifacts/test-times.tsv
//
// Its exit status is 0 unless the input cannot be read: the caller takes the result
// from `go test`'s own exit status (pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

// testKey names one test of one package.
type testKey struct{ pkg, test string }

// testTime is how long one test took.
type testTime struct {
	testKey
	seconds float64
}

// report holds what has been read so far.
type report struct {
	out io.Writer
	// running buffers the output of every test that has not ended yet.
	running map[testKey]*strings.Builder
	times   []testTime
}

func main() {
	timesFile := flag.String("times", "", "write every test's time to this file (seconds, package, test)")
	slowest := flag.Int("slowest", 15, "print this many of the slowest top-level tests at the end")
	flag.Parse()
	r := &report{out: os.Stdout, running: map[testKey]*strings.Builder{}}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	r.flushAll("")
	if *timesFile != "" {
		if err := r.writeTimes(*timesFile); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
		}
	}
	r.printSlowest(*slowest)
}

// read handles every event of in; a line that is not an event (go test's own messages
// before a package runs) is printed as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintln(r.out, string(line))
			continue
		}
		r.handle(ev)
	}
	return sc.Err()
}

func (r *report) handle(ev event) {
	switch {
	case ev.Action == "build-output":
		fmt.Fprint(r.out, ev.Output)
	case ev.Test == "":
		r.handlePackage(ev)
	default:
		r.handleTest(ev)
	}
}

// handlePackage prints a package's own lines but the bare PASS a verbose binary ends
// with; when the package failed, the output of its tests that never ended goes first.
func (r *report) handlePackage(ev event) {
	switch ev.Action {
	case "output":
		if ev.Output == "PASS\n" || strings.HasPrefix(ev.Output, "=== ") {
			return
		}
		fmt.Fprint(r.out, ev.Output)
	case "fail":
		r.flushAll(ev.Package)
	}
}

func (r *report) handleTest(ev event) {
	key := testKey{ev.Package, ev.Test}
	switch ev.Action {
	case "run":
		r.running[key] = &strings.Builder{}
	case "output":
		b := r.running[key]
		if b == nil {
			b = &strings.Builder{}
			r.running[key] = b
		}
		b.WriteString(ev.Output)
	case "pass", "skip", "fail":
		r.times = append(r.times, testTime{key, ev.Elapsed})
		if b := r.running[key]; b != nil && ev.Action == "fail" {
			fmt.Fprint(r.out, b.String())
		}
		delete(r.running, key)
	}
}

// flushAll prints the output of the tests of pkg (of every package when pkg is "") that
// have not ended, in the order of their names.
func (r *report) flushAll(pkg string) {
	var keys []testKey
	for k := range r.running {
		if pkg == "" || k.pkg == pkg {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pkg != keys[j].pkg {
			return keys[i].pkg < keys[j].pkg
		}
		return keys[i].test < keys[j].test
	})
	for _, k := range keys {
		if out := r.running[k].String(); out != "" {
			fmt.Fprintf(r.out, "--- %s (%s) did not end; its output:\n%s", k.test, k.pkg, out)
		}
		delete(r.running, k)
	}
}

func (r *report) writeTimes(path string) error {
	var b strings.Builder
	for _, t := range r.times {
		fmt.Fprintf(&b, "%.2f\t%s\t%s\n", t.seconds, t.pkg, t.test)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// printSlowest prints the n slowest top-level tests.
func (r *report) printSlowest(n int) {
	var top []testTime
	for _, t := range r.times {
		if !strings.Contains(t.test, "/") {
			top = append(top, t)
		}
	}
	if n <= 0 || len(top) == 0 {
		return
	}
	sort.SliceStable(top, func(i, j int) bool { return top[i].seconds > top[j].seconds })
	top = top[:min(n, len(top))]
	fmt.Fprintf(r.out, "slowest tests:\n")
	for _, t := range top {
		fmt.Fprintf(r.out, "%8.1fs  %s %s\n", t.seconds, strings.TrimPrefix(t.pkg, "github.com/sandgate/sandgate/"), t.test)
	}
}
