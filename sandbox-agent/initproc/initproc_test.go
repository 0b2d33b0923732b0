package initproc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

func TestReapOrphans(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	// A tracked child that has exited must keep its status for its owner.
	tracked := exec.Command("sh", "-c", "exit 5")
	if err := procs.Start(tracked); err != nil {
		t.Fatal(err)
	}
	// The shell exits at once and orphans its background sleep to us.
	orphanMaker := exec.Command("sh", "-c", "sleep 0.2 & echo $!")
	out, err := orphanMaker.Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ppid, state, ok := procs.Stat(orphan)
		if ok && ppid != os.Getpid() {
			t.Fatalf("orphan %d reparented to %d, not to the subreaper", orphan, ppid)
		}
		if ok && state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d never became a zombie", orphan)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := ReapOrphans(); n < 1 {
		t.Fatalf("reaped %d zombies", n)
	}
	if _, _, ok := procs.Stat(orphan); ok {
		t.Fatalf("orphan %d still exists", orphan)
	}
	err = procs.Wait(tracked)
	if code := procs.ExitCode(tracked.ProcessState, err); code != 5 {
		t.Fatalf("tracked child's exit code %d (err %v): the reaper stole it", code, err)
	}
}

// TestReapExited: the reaper of every SIGCHLD takes an orphan's zombie, leaves a
// tracked child's exit status to its owner, and names that child when it stands first.
func TestReapExited(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	tracked := exec.Command("sh", "-c", "exit 5")
	if err := procs.Start(tracked); err != nil {
		t.Fatal(err)
	}
	waitZombie(t, tracked.Process.Pid)
	orphan := startOrphan(t)
	waitZombie(t, orphan)
	reaped, blocker := ReapExited()
	if blocker != 0 && blocker != tracked.Process.Pid {
		t.Fatalf("blocker %d, want the tracked child %d or none", blocker, tracked.Process.Pid)
	}
	err := procs.Wait(tracked)
	if code := procs.ExitCode(tracked.ProcessState, err); code != 5 {
		t.Fatalf("tracked child's exit code %d (err %v): the reaper stole it", code, err)
	}
	if blocker != 0 {
		n, b := ReapExited()
		if b != 0 {
			t.Fatalf("blocked by %d after the tracked child was waited for", b)
		}
		reaped += n
	}
	if reaped < 1 {
		t.Fatalf("reaped %d zombies", reaped)
	}
	if _, _, ok := procs.Stat(orphan); ok {
		t.Fatalf("orphan %d still exists", orphan)
	}
	if n, b := ReapExited(); n != 0 || b != 0 {
		t.Fatalf("nothing left, yet reaped %d, blocker %d", n, b)
	}
}

// startOrphan starts a shell that exits at once and leaves its background sleep to this
// process (a subreaper), and returns the sleep's pid.
func startOrphan(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("sh", "-c", "sleep 0.2 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitZombie waits until pid, a child of this process, has exited and is not yet reaped.
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ppid, state, ok := procs.Stat(pid)
		if ok && ppid != os.Getpid() {
			t.Fatalf("%d is a child of %d, not of the subreaper", pid, ppid)
		}
		if ok && state == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d never became a zombie", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSupervisor(t *testing.T) {
	env := procs.NewEnvironment()
	tests := []struct {
		name   string
		argv   []string
		signal syscall.Signal
		want   int
	}{
		{"exit code", []string{"sh", "-c", "exit 9"}, 0, 9},
		{"killed by a forwarded signal", []string{"sleep", "30"}, syscall.SIGUSR1, 128 + int(syscall.SIGUSR1)},
		{"handles the signal", []string{"sh", "-c", "trap 'exit 42' TERM; while :; do sleep 0.05; done"}, syscall.SIGTERM, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSupervisor(env)
			if err := s.Start(tt.argv); err != nil {
				t.Fatal(err)
			}
			if tt.signal != 0 {
				time.Sleep(200 * time.Millisecond)
				if !s.Signal(tt.signal) {
					t.Fatal("no entrypoint to signal")
				}
			}
			select {
			case code := <-s.Exited():
				if code != tt.want {
					t.Fatalf("exit code %d, want %d", code, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("entrypoint did not exit")
			}
			if s.Running() || s.Signal(syscall.SIGTERM) {
				t.Fatal("supervisor still reports a running entrypoint")
			}
		})
	}
	t.Run("replace reports only the new one", func(t *testing.T) {
		s := NewSupervisor(env)
		if err := s.Start([]string{"sleep", "30"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Start([]string{"sh", "-c", "sleep 0.3; exit 4"}); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-s.Exited():
			if code != 4 {
				t.Fatalf("exit code %d, want the replacement's 4", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("replacement did not exit")
		}
	})
	t.Run("not found", func(t *testing.T) {
		s := NewSupervisor(env)
		if err := s.Start([]string{"no-such-program-xyz"}); err == nil {
			t.Fatal("started a missing program")
		}
		if _, err := Resolve("/no/such/file", nil); err == nil {
			t.Fatal("resolved a missing path")
		}
	})
}

// TestSettle checks that Settle tells an entrypoint that exits at once from one that
// runs, without waiting out its window for one that waits.
func TestSettle(t *testing.T) {
	env := procs.NewEnvironment()
	tests := []struct {
		name       string
		argv       []string
		window     time.Duration
		wantExited bool
		wantCode   int
	}{
		{"exits at once", []string{"sh", "-c", "echo bye; exit 7"}, time.Minute, true, 7},
		{"false", []string{"false"}, time.Minute, true, 1},
		// With a minute's window, an answer for these two comes from seeing them asleep;
		// the test's own timeout is what would catch a Settle that waits the window out.
		{"waits for input", []string{"tail", "-f", "/dev/null"}, time.Minute, false, 0},
		{"a shell waiting for its child", []string{"sh", "-c", "sleep 30; exit 3"}, time.Minute, false, 0},
		{"computes without waiting: the window ends it", []string{"sh", "-c", "while :; do :; done"}, 300 * time.Millisecond, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSupervisor(env)
			if err := s.Start(tt.argv); err != nil {
				t.Fatal(err)
			}
			exited, code := s.Settle(t.Context(), tt.window)
			defer func() {
				s.Signal(syscall.SIGKILL) // false once it has exited
				<-s.Exited()
			}()
			if exited != tt.wantExited || code != tt.wantCode {
				t.Fatalf("Settle = exited %t code %d, want %t %d", exited, code, tt.wantExited, tt.wantCode)
			}
			if !exited && !s.Running() {
				t.Fatal("Settle reported a running entrypoint that is gone")
			}
		})
	}
	t.Run("no entrypoint", func(t *testing.T) {
		if exited, _ := NewSupervisor(env).Settle(t.Context(), time.Minute); exited {
			t.Fatal("exited without an entrypoint")
		}
	})
}
