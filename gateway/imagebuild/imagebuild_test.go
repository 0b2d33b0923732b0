package imagebuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseBuilds(t *testing.T) {
	got, err := ParseBuilds([]string{" a:1+b:1 = make a b ", "", "c:2=./build c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || strings.Join(got[0].Images, ",") != "a:1,b:1" || got[0].Command != "make a b" || got[1].Images[0] != "c:2" {
		t.Fatalf("parsed %+v", got)
	}
	for _, bad := range []string{"a:1", "a:1=", "=cmd", "a:1+=cmd", "a b=cmd"} {
		if _, err := ParseBuilds([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseBuilds([]string{"a:1=x", "a:1+b:1=y"}); err == nil {
		t.Error("an image built by two entries accepted")
	}
}

// engineDir stands in for the engine's image store in these tests of the manager's
// bookkeeping: an image exists when a file of its name does (the e2e test
// TestImageBuildsInTheBackground builds real images on Docker).
type engineDir string

func (d engineDir) path(image string) string {
	return filepath.Join(string(d), strings.NewReplacer("/", "_", ":", "_").Replace(image))
}

func (d engineDir) has(_ context.Context, image string) (bool, error) {
	_, err := os.Stat(d.path(image))
	return err == nil, nil
}

func waitState(t *testing.T, m *Manager, i int, state string) Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := m.List()[i]
		if st.State == state {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %d is %s (%q, %q), want %s", i, st.State, st.Step, st.Message, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBuildsRunInTurnAndReport: builds run one after the other; while one waits or runs,
// its images are pending and its latest line of output is its step; a build whose
// images exist is Ready without running; a failed one keeps its last lines.
func TestBuildsRunInTurnAndReport(t *testing.T) {
	dir := t.TempDir()
	eng := engineDir(dir)
	release := filepath.Join(dir, "release")
	if err := os.WriteFile(eng.path("present:1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	builds := []Build{
		{Images: []string{"present:1"}, Command: "touch " + filepath.Join(dir, "ran-present")},
		{Images: []string{"slow:1", "slow-alias:1"}, Command: "echo step one; echo step two; while [ ! -e " + release + " ]; do sleep 0.02; done; touch " + eng.path("slow:1") + " " + eng.path("slow-alias:1")},
		{Images: []string{"broken:1"}, Command: "echo fetching; echo it broke >&2; exit 3"},
		{Images: []string{"liar:1"}, Command: "echo done"},
	}
	m := New(builds, eng.has, nil)
	t.Cleanup(m.Stop)
	if _, pending := m.Pending("slow:1"); !pending {
		t.Fatal("a build not yet started is not pending")
	}
	m.Start()
	st := waitState(t, m, 1, StateBuilding)
	if _, pending := m.Pending("slow-alias:1"); !pending {
		t.Fatal("the second image of a running build is not pending")
	}
	if _, pending := m.Pending("present:1"); pending {
		t.Fatal("an image the engine has is pending")
	}
	if _, err := os.Stat(filepath.Join(dir, "ran-present")); err == nil {
		t.Fatal("the build of an image the engine has ran")
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.Step != "step two" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		st, _ = m.Pending("slow:1")
	}
	if st.Step != "step two" || st.StartedAt == nil {
		t.Fatalf("running build reports %+v, want its latest line and its start", st)
	}
	if st, _ := m.Pending("broken:1"); st.State != StateWaiting {
		t.Fatalf("the build behind a running one is %s, want %s", st.State, StateWaiting)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitState(t, m, 1, StateReady)
	failed := waitState(t, m, 2, StateFailed)
	if !strings.Contains(failed.Message, "exit status 3") || !strings.Contains(failed.Message, "it broke") {
		t.Fatalf("failed build's message %q, want the exit and its last lines", failed.Message)
	}
	liar := waitState(t, m, 3, StateFailed)
	if !strings.Contains(liar.Message, "without liar:1") {
		t.Fatalf("a build that made no image: %q", liar.Message)
	}
	for _, img := range []string{"slow:1", "broken:1", "liar:1"} {
		if _, pending := m.Pending(img); pending {
			t.Errorf("%s still pending after its build ended", img)
		}
	}
}

// TestStopEndsTheRunningBuild: Stop ends the running command's whole process group, and
// the builds behind it never run.
func TestStopEndsTheRunningBuild(t *testing.T) {
	dir := t.TempDir()
	eng := engineDir(dir)
	pidFile := filepath.Join(dir, "child")
	m := New([]Build{
		{Images: []string{"long:1"}, Command: "sleep 60 & echo $! > " + pidFile + "; wait"},
		{Images: []string{"next:1"}, Command: "touch " + filepath.Join(dir, "ran-next")},
	}, eng.has, nil)
	m.Start()
	waitState(t, m, 0, StateBuilding)
	var pid string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 1 {
			pid = strings.TrimSpace(string(b))
			break
		}
	}
	if pid == "" {
		t.Fatal("the build's child never started")
	}
	m.Stop()
	for _, st := range m.List() {
		if st.State != StateFailed {
			t.Errorf("build of %v is %s after Stop, want %s", st.Images, st.State, StateFailed)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ran-next")); err == nil {
		t.Error("a build behind the stopped one ran")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + pid); err != nil {
			break
		}
		if b, _ := os.ReadFile("/proc/" + pid + "/stat"); strings.Contains(string(b), ") Z ") {
			break // gone but for its parent's reaping
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build's child %s outlived Stop", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
