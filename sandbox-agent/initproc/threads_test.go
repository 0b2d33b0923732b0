package initproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// threadsChildEnv makes the test binary act as the child of TestReserveThreads.
const threadsChildEnv = "SANDGATE_THREADS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(vforkParentEnv) != "" {
		vforkParent()
	}
	if mode := os.Getenv(threadsChildEnv); mode != "" {
		os.Exit(threadsChild(mode == "reserve"))
	}
	os.Exit(m.Run())
}

// threadsChild reserves threads (or not), says ready, waits until its parent has capped
// its pids at what it has, then makes 16 goroutines sit in blocking syscalls at once.
func threadsChild(reserve bool) int {
	if reserve {
		ReserveThreads(ReservedThreads)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 3
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.Timespec{Nsec: int64(300 * time.Millisecond)}
			_ = syscall.Nanosleep(&ts, nil)
		}()
	}
	wg.Wait()
	return 0
}

// pidsCgroup makes a pids cgroup for the test, or skips when it cannot.
func pidsCgroup(t *testing.T) string {
	t.Helper()
	parent := "/sys/fs/cgroup/pids" // cgroup v1
	if _, err := os.Stat(parent); err != nil {
		ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control") // cgroup v2
		if err != nil || !strings.Contains(string(ctl), "pids") {
			t.Skip("no pids cgroup controller to put the child in")
		}
		parent = "/sys/fs/cgroup"
	}
	dir := filepath.Join(parent, fmt.Sprintf("sandgate-threads-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a pids cgroup (needs root): %v", err)
	}
	t.Cleanup(func() {
		// The cgroup can be removed once its process has been reaped.
		for range 50 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cgroup %s was not removed", dir)
	})
	return dir
}

// TestReserveThreads runs a child whose pids are capped at exactly what it holds, so that
// the runtime cannot make a thread, and then needs 16 threads at once. With the reserve
// it finishes; without it the runtime aborts — the control that shows the cap bites.
func TestReserveThreads(t *testing.T) {
	for _, tt := range []struct {
		mode      string
		wantAbort bool
	}{{"reserve", false}, {"none", true}} {
		t.Run(tt.mode, func(t *testing.T) {
			cg := pidsCgroup(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), threadsChildEnv+"="+tt.mode)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("child said %q, %v", line, err)
			}
			if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
				t.Fatal(err)
			}
			current, err := os.ReadFile(filepath.Join(cg, "pids.current"))
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(strings.TrimSpace(string(current)))
			if tt.mode == "reserve" && n < ReservedThreads {
				t.Fatalf("the child has %d tasks after reserving %d threads", n, ReservedThreads)
			}
			if err := os.WriteFile(filepath.Join(cg, "pids.max"), current, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := stdin.Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			aborted := strings.Contains(stderr.String(), "failed to create new OS thread")
			if tt.wantAbort {
				if !aborted || err == nil {
					t.Fatalf("without the reserve the child ended with %v and stderr %q; want the runtime's abort", err, tail(stderr.String()))
				}
				return
			}
			if err != nil || aborted {
				t.Fatalf("with %d reserved threads (%d tasks capped) the child ended with %v: %s", ReservedThreads, n, err, tail(stderr.String()))
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 400 {
		return s[:400]
	}
	return s
}
