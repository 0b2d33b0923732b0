package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportOfARealRun feeds the report what `go test -json` prints for the fixture
// module (testdata/fixture): a test that passes, one that fails in a subtest, one that
// panics and a package that does not compile.
func TestReportOfARealRun(t *testing.T) {
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = filepath.Join("testdata", "fixture")
	cmd.Env = append(os.Environ(), "FIXTURE_PANIC=1", "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	events, err := cmd.Output()
	if err == nil {
		t.Fatalf("the fixture's tests passed; they must fail:\n%s", events)
	}
	var out bytes.Buffer
	r := &report{out: &out, running: map[testKey]*strings.Builder{}}
	if err := r.read(bytes.NewReader(events)); err != nil {
		t.Fatal(err)
	}
	r.flushAll("")
	r.printSlowest(3)
	got := out.String() + stderr.String()
	for _, want := range []string{
		"why the subtest failed",
		"output of a test that failed",
		"before the panic",
		"the fixture panics",
		"FAIL\tfixture\t",
		"not a number", // the compile error
		"slowest tests:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "output of a test that passed") {
		t.Errorf("the report prints the output of a test that passed:\n%s", got)
	}
	tests := map[string]bool{}
	for _, tt := range r.times {
		tests[tt.test] = true
	}
	for _, want := range []string{"TestPasses", "TestFails", "TestFails/sub", "TestPanics"} {
		if !tests[want] {
			t.Errorf("no time recorded for %s (have %v)", want, tests)
		}
	}
}

// TestOutputOfATestThatNeverEnded is printed when its package fails: a binary killed by
// its timeout ends the package without ending the test.
func TestOutputOfATestThatNeverEnded(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestHangs"}`,
		`{"Action":"output","Package":"p","Test":"TestHangs","Output":"last words\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t600.0s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":600}`,
	}, "\n")
	var out bytes.Buffer
	r := &report{out: &out, running: map[testKey]*strings.Builder{}}
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "last words") || !strings.Contains(got, "TestHangs") {
		t.Errorf("the output of the test that never ended is missing:\n%s", got)
	}
}
