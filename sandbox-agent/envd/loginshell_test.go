package envd_test

import (
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/sandbox-agent/envd"
	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
)

// TestLoginShellDirect runs `bash -l -c` commands as the E2B SDKs do, with a profile
// that sets variables, extends PATH and counts its runs: a plain command gets what
// bash would give it without the profile running again, a profile change is seen by the
// next command, anything else goes through bash.
func TestLoginShellDirect(t *testing.T) {
	sb := newSandbox(t)
	runs := filepath.Join(sb.home, "profile-runs")
	profile := func(value string) {
		writeFile(t, filepath.Join(sb.home, ".profile"),
			"export FROM_PROFILE="+value+"\nexport PATH=\"$HOME/pbin:$PATH\"\necho run >> \"$HOME/profile-runs\"\n")
	}
	profile("one")
	if err := os.MkdirAll(filepath.Join(sb.home, "pbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	countRuns := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run\n")
	}
	login := func(script string, envs map[string]string) []string {
		t.Helper()
		r := sb.run("user", &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}, Envs: envs})
		if r.err != nil || r.end.GetExitCode() != 0 || r.stderr != "" {
			t.Fatalf("bash -l -c %q: %v, exit %d, stderr %q", script, r.err, r.end.GetExitCode(), r.stderr)
		}
		env := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		slices.Sort(env)
		return env
	}

	// The agent probes its shell at start-up; until then every command goes through bash.
	// On a busy machine that probe may be killed for time: the next is run after
	// loginProbeRetry (TestLoginShellProbeRetried), which the wait outlasts.
	var direct []string
	eventually(t, 45*time.Second, "a plain command to skip the login shell", func() bool {
		before := countRuns()
		direct = login("env", nil)
		return countRuns() == before
	})
	// Quoted, the script is no longer plain: bash parses it to the same exec.
	viaBash := login("'env'", nil)
	if diff := cmp.Diff(viaBash, direct); diff != "" {
		t.Errorf("environment direct vs through bash (-bash +direct):\n%s", diff)
	}
	for _, want := range []string{"FROM_PROFILE=one", "PATH=" + sb.home + "/pbin:", "SHLVL=", "USER=user", "PWD=" + sb.home} {
		if !slices.ContainsFunc(direct, func(kv string) bool { return strings.HasPrefix(kv, want) }) {
			t.Errorf("direct environment lacks %s: %q", want, direct)
		}
	}

	t.Run("profile change", func(t *testing.T) {
		profile("two")
		if env := login("env", nil); !slices.Contains(env, "FROM_PROFILE=two") {
			t.Errorf("after the profile changed: %q", env)
		}
	})
	t.Run("request env", func(t *testing.T) {
		if env := login("env", map[string]string{"FROM_REQUEST": "x"}); !slices.Contains(env, "FROM_REQUEST=x") {
			t.Errorf("request env lost: %q", env)
		}
	})
	t.Run("not plain", func(t *testing.T) {
		// Probed once the profile change has settled.
		eventually(t, 15*time.Second, "a plain command to skip the login shell", func() bool {
			before := countRuns()
			login("env", nil)
			return countRuns() == before
		})
		before := countRuns()
		login("env | cat", nil)
		if got := countRuns() - before; got != 1 {
			t.Errorf("a pipeline ran the profile %d times, want 1", got)
		}
	})
	t.Run("exec fails", func(t *testing.T) {
		// A script without #!: bash runs it itself.
		script := filepath.Join(sb.home, "pbin", "noshebang")
		if err := os.WriteFile(script, []byte("echo FROM_SCRIPT=$FROM_PROFILE\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if env := login("noshebang", nil); !slices.Contains(env, "FROM_SCRIPT=two") {
			t.Errorf("script without #!: %q", env)
		}
	})
}

// TestLoginShellProbeRetried: a probe that failed (here its profile was too slow once,
// and the probe was killed) is run again after loginProbeRetry, and commands skip the
// login shell from then on instead of paying for it until a profile file changes.
func TestLoginShellProbeRetried(t *testing.T) {
	t.Cleanup(envd.SetLoginProbeTimes(300*time.Millisecond, 500*time.Millisecond))
	sb := newSandbox(t)
	runs := filepath.Join(sb.home, "profile-runs")
	// The first run of the profile is slow; every run leaves a line in profile-runs.
	writeFile(t, filepath.Join(sb.home, ".profile"),
		"echo run >> \"$HOME/profile-runs\"\nif [ ! -e \"$HOME/slow-once\" ]; then : > \"$HOME/slow-once\"; sleep 2; fi\n")
	// Until the profile has settled, commands go through bash and none probes.
	time.Sleep(envd.SettleTime)
	countRuns := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run\n")
	}
	login := func() {
		t.Helper()
		r := sb.run("user", &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"}})
		if r.err != nil || r.end.GetExitCode() != 0 {
			t.Fatalf("bash -l -c true: %v, exit %d, stderr %q", r.err, r.end.GetExitCode(), r.stderr)
		}
	}
	eventually(t, 15*time.Second, "a command to skip the login shell after the failed probe", func() bool {
		login()
		before := countRuns()
		login()
		return countRuns() == before
	})
}

// TestLoginShellDirectWithHangupIgnored: an agent started with SIGHUP ignored (under
// nohup) still skips the login shell: bash lists the inherited ignored signal as a
// trap, which is not the profile's doing, and the program the agent execs inherits it
// ignored as bash's would.
func TestLoginShellDirectWithHangupIgnored(t *testing.T) {
	signal.Ignore(syscall.SIGHUP)
	t.Cleanup(func() { signal.Reset(syscall.SIGHUP) })
	sb := newSandbox(t)
	runs := filepath.Join(sb.home, "profile-runs")
	writeFile(t, filepath.Join(sb.home, ".profile"), "echo run >> \"$HOME/profile-runs\"\n")
	countRuns := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run\n")
	}
	eventually(t, 15*time.Second, "a plain command to skip the login shell", func() bool {
		before := countRuns()
		r := sb.run("user", &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"}})
		if r.err != nil || r.end.GetExitCode() != 0 {
			t.Fatalf("bash -l -c true: %v, exit %d, stderr %q", r.err, r.end.GetExitCode(), r.stderr)
		}
		return countRuns() == before
	})
}

// TestLoginShellSeesProfileChanges: a profile file created, edited in place, replaced
// by rename or removed between two commands changes what the next plain command gets,
// though plain commands skip the login shell once it was probed.
func TestLoginShellSeesProfileChanges(t *testing.T) {
	sb := newSandbox(t)
	runs := filepath.Join(sb.home, "profile-runs")
	bashProfile := filepath.Join(sb.home, ".bash_profile")
	const countRun = "echo run >> \"$HOME/profile-runs\"\n"
	writeFile(t, filepath.Join(sb.home, ".profile"), "export FROM=profile\n"+countRun)
	countRuns := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run\n")
	}
	from := func() string {
		t.Helper()
		r := sb.run("user", &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "printenv FROM"}})
		if r.err != nil || r.end.GetExitCode() != 0 || r.stderr != "" {
			t.Fatalf("bash -l -c 'printenv FROM': %v, exit %d, stderr %q", r.err, r.end.GetExitCode(), r.stderr)
		}
		return strings.TrimSuffix(r.stdout, "\n")
	}
	probed := func(want string) {
		t.Helper()
		eventually(t, 45*time.Second, "a plain command to skip the login shell", func() bool {
			before := countRuns()
			return from() == want && countRuns() == before
		})
	}
	probed("profile")

	steps := []struct {
		name   string
		change func()
		want   string
	}{
		// bash reads ~/.bash_profile instead of ~/.profile when it exists.
		{"bash_profile created", func() { writeFile(t, bashProfile, "export FROM=bash_profile_1\n"+countRun) }, "bash_profile_1"},
		{"bash_profile edited, same size", func() { writeFile(t, bashProfile, "export FROM=bash_profile_2\n"+countRun) }, "bash_profile_2"},
		{"bash_profile replaced by rename", func() {
			writeFile(t, bashProfile+".new", "export FROM=bash_profile_3\n"+countRun)
			if err := os.Rename(bashProfile+".new", bashProfile); err != nil {
				t.Fatal(err)
			}
		}, "bash_profile_3"},
		{"bash_profile removed", func() {
			if err := os.Remove(bashProfile); err != nil {
				t.Fatal(err)
			}
		}, "profile"},
	}
	last := "profile"
	for _, step := range steps {
		// Commands skip the login shell: the probe is the one the next command would use.
		probed(last)
		step.change()
		if got := from(); got != step.want {
			t.Errorf("%s: FROM=%q, want %q", step.name, got, step.want)
		}
		last = step.want
	}
}
