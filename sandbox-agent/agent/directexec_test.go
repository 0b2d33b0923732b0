package agent

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

func TestPlainWords(t *testing.T) {
	builtins := map[string]bool{}
	for _, b := range bashBuiltins {
		builtins[b] = true
	}
	tests := []struct {
		name   string
		script string
		want   []string // nil: through the shell
	}{
		{"one word", "ls", []string{"ls"}},
		{"arguments", "ls -la /tmp", []string{"ls", "-la", "/tmp"}},
		{"blanks around and between", " \tls  -l\t/tmp \t", []string{"ls", "-l", "/tmp"}},
		{"absolute path", "/usr/bin/env", []string{"/usr/bin/env"}},
		{"plain punctuation", "python3 -m http.server 8000 --bind=127.0.0.1 a,b +x @y c:d", []string{"python3", "-m", "http.server", "8000", "--bind=127.0.0.1", "a,b", "+x", "@y", "c:d"}},
		{"percent in an argument", "date +%s", []string{"date", "+%s"}},
		{"true alone", "true", []string{"true"}},
		{"false alone", "false", []string{"false"}},
		{"underscore first", "_tool x", []string{"_tool", "x"}},
		{"digit first", "7z x", []string{"7z", "x"}},

		{"empty", "", nil},
		{"only blanks", " \t ", nil},
		{"true with arguments", "true --help", nil},
		{"false with arguments", "false x", nil},
		{"newline", "ls\nrm x", nil},
		{"carriage return", "ls\r", nil},
		{"vertical tab", "ls\vx", nil},
		{"non-ASCII", "echö", nil},
		{"non-ASCII argument", "ls héllo", nil},
		{"NUL", "ls\x00x", nil},
		{"assignment prefix", "A=1 env", nil},
		{"assignment alone", "A=1", nil},
		{"percent first", "%1", nil},
		{"percent in the first word", "a%b", nil},
		{"option to bash", "-x", nil},
		{"plus option to bash", "+x", nil},
		{"dot first", ".hidden", nil},
		{"relative path", "./run", nil},
		{"colon builtin", ":", nil},
		{"dot builtin", ". file", nil},
		{"keyword if", "if true", nil},
		{"keyword time", "time ls", nil},
		{"keyword coproc", "coproc ls", nil},
		{"keyword function", "function f", nil},
		{"keyword in", "in", nil},
		{"keyword do", "do", nil},
		{"builtin echo", "echo hi", nil},
		{"builtin pwd", "pwd", nil},
		{"builtin exec", "exec ls", nil},
		{"builtin command", "command ls", nil},
		{"builtin builtin", "builtin ls", nil},
		{"builtin cd", "cd /tmp", nil},
		{"builtin exit", "exit 3", nil},
		{"builtin kill", "kill 1", nil},
		{"builtin test", "test -f x", nil},
		{"builtin printf", "printf x", nil},
		{"builtin source", "source x", nil},
		{"builtin eval", "eval ls", nil},
		{"builtin export", "export A", nil},
		{"builtin enable", "enable -n ls", nil},
		{"builtin ulimit", "ulimit -n", nil},
		{"builtin umask", "umask 077", nil},
		{"builtin wait", "wait", nil},
		{"builtin type", "type ls", nil},
		{"builtin hash", "hash ls", nil},
		{"builtin read", "read x", nil},
		{"builtin trap", "trap x", nil},
		{"builtin set", "set -x", nil},
		{"builtin shopt", "shopt -s extglob", nil},
		{"builtin alias", "alias ls", nil},
		{"builtin declare", "declare -x", nil},
	}
	// Every byte bash may give a meaning to, at the start, middle and end of the
	// first word and of an argument.
	for _, c := range "\"'`$\\;|&<>()*?[]{}~#!^\n" {
		for _, s := range []string{"%cls", "l%cs", "ls%c", "ls %c", "ls a%cb", "ls x%c"} {
			script := strings.ReplaceAll(s, "%c", string(c))
			tests = append(tests, struct {
				name   string
				script string
				want   []string
			}{"metacharacter " + script, script, nil})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, plainWords(tt.script, builtins)); diff != "" {
				t.Fatalf("plainWords(%q) (-want +got):\n%s", tt.script, diff)
			}
		})
	}
}

// newProbedServer is a Server whose probe has run; its commands' base environment is the
// test process's.
func newProbedServer(t *testing.T) *Server {
	t.Helper()
	if !procs.IsBash(procs.Shell()) {
		t.Skip("no bash")
	}
	s, err := New(Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	<-s.probeDone
	if s.shellTraits.Load() == nil {
		t.Fatal("the shell probe failed: see the log")
	}
	return s
}

type runResult struct {
	Stdout, Stderr []string
	Exit           int
}

// run runs cmd and returns its output lines (sorted when sortOut: env's order is bash's
// variable table, not the environment's) and exit code.
func run(t *testing.T, cmd *exec.Cmd, sortOut bool) runResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	lines := func(b []byte) []string {
		if len(b) == 0 {
			return nil
		}
		l := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if sortOut {
			sort.Strings(l)
		}
		return l
	}
	return runResult{lines(stdout.Bytes()), lines(stderr.Bytes()), procs.ExitCode(cmd.ProcessState, err)}
}

// TestDirectExecMatchesShell runs plain commands both ways: the program the agent execs
// itself must see what it sees when bash execs it (argv, environment, working
// directory) and end the same.
func TestDirectExecMatchesShell(t *testing.T) {
	s := newProbedServer(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	envProgram, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program")
	}
	wd, _ := os.Getwd()
	tests := []struct {
		name   string
		script string
		cwd    string
		envs   map[string]string
	}{
		{"env", "env", "", nil},
		{"env by absolute path", envProgram, "", nil},
		{"env in a directory", "env", real, nil},
		{"env in a directory through a symbolic link", "env", link, nil},
		{"PWD that names the directory", "env", real, map[string]string{"PWD": real}},
		{"PWD that names the agent's directory", "env", "", map[string]string{"PWD": wd}},
		{"PWD elsewhere", "env", real, map[string]string{"PWD": "/"}},
		{"PWD relative", "env", real, map[string]string{"PWD": "."}},
		{"PWD missing", "env", real, map[string]string{"PWD": "/no/such/dir"}},
		{"PWD through a symbolic link", "env", real, map[string]string{"PWD": link}},
		{"PWD with a dot", "env", real, map[string]string{"PWD": real + "/."}},
		{"SHLVL", "env", "", map[string]string{"SHLVL": "3"}},
		{"SHLVL 0", "env", "", map[string]string{"SHLVL": "0"}},
		{"OLDPWD a directory", "env", "", map[string]string{"OLDPWD": "/"}},
		{"OLDPWD not a directory", "env", "", map[string]string{"OLDPWD": "/no/such/dir"}},
		{"an old _", "env", "", map[string]string{"_": "/somewhere/else"}},
		{"PATH elements ending in a slash", "env", "", map[string]string{"PATH": "/usr/local/bin/:/usr/bin/:/bin/"}},
		{"PATH with a doubled slash", "env", "", map[string]string{"PATH": "/usr//bin:/bin"}},
		{"PATH starting with directories without it", "env", "", map[string]string{"PATH": dir + ":/nonexistent:/usr/bin:/bin"}},
		{"unusual variables", "env", "", map[string]string{
			"HOSTNAME": "h", "TERM": "xterm", "LANG": "C.UTF-8", "HOME": "/root", "SHELL": "/bin/sh",
			"MULTI": "line one\nline two", "FUNCLIKE": "() { echo hi; }", "EMPTY": "",
			"1X": "invalid name", "A-B": "invalid name", "A.B": "invalid name", "lower": "x",
			"SPACES": "  a  b  ", "QUOTES": `'"$x` + "`",
		}},
		{"arguments", envProgram + " -u HOME", "", nil},
		{"physical pwd", "/bin/pwd -P", link, nil},
		{"logical pwd", "/bin/pwd -L", link, nil},
		{"true", "true", "", nil},
		{"false", "false", "", nil},
		{"program exit code and stderr", "ls /nonexistent/file", "", nil},
		{"id", "id", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shell, err := s.shellCommand(tt.script, tt.cwd, tt.envs, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			direct := s.directCommand(tt.script, shell)
			if direct == nil {
				t.Fatalf("%q goes through the shell", tt.script)
			}
			sortOut := strings.Contains(tt.script, "env")
			want := run(t, shell, sortOut)
			got := run(t, direct, sortOut)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("direct (+) differs from bash (-):\n%s", diff)
			}
		})
	}
	t.Run("argv0", func(t *testing.T) {
		// What the program sees as argv[0] is the word as written, as bash gives it.
		bin := t.TempDir()
		script := filepath.Join(bin, "show-argv")
		if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s|' \"$0\" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		envs := map[string]string{"PATH": bin + ":/usr/bin:/bin"}
		for _, line := range []string{"show-argv a b", script + " x"} {
			shell, _ := s.shellCommand(line, "", envs, nil, nil)
			direct := s.directCommand(line, shell)
			if direct == nil {
				t.Fatalf("%q goes through the shell", line)
			}
			if diff := cmp.Diff(run(t, shell, false), run(t, direct, false)); diff != "" {
				t.Fatalf("%q: direct (+) differs from bash (-):\n%s", line, diff)
			}
		}
	})
}

// TestDirectExecDeclines lists commands that must go through the shell, for their words
// or for their environment.
func TestDirectExecDeclines(t *testing.T) {
	s := newProbedServer(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "ls"), 0o755); err != nil { // a directory named ls
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		script string
		cwd    string
		envs   map[string]string
	}{
		{"pipeline", "ls | cat", "", nil},
		{"builtin", "echo hi", "", nil},
		{"keyword", "time ls", "", nil},
		{"assignment", "A=1 ls", "", nil},
		{"glob", "ls *", "", nil},
		{"tilde", "ls ~", "", nil},
		{"quoted", `ls "a b"`, "", nil},
		{"escaped", `\ls`, "", nil},
		{"missing command", "no-such-program-here", "", nil},
		{"missing absolute path", "/no/such/program", "", nil},
		{"relative path", "./notexec", dir, nil},
		{"relative path with a directory", "sub/prog", dir, nil},
		{"not executable on PATH", "notexec", "", map[string]string{"PATH": dir + ":/usr/bin:/bin"}},
		{"not executable by path", notExec, "", nil},
		{"directory by path", dir, "", nil},
		{"empty PATH element first", "ls", "", map[string]string{"PATH": ":/usr/bin:/bin"}},
		{"relative PATH element first", "ls", "", map[string]string{"PATH": "bin:/usr/bin:/bin"}},
		{"tilde PATH element first", "ls", "", map[string]string{"PATH": "~/bin:/usr/bin:/bin"}},
		{"empty PATH", "ls", "", map[string]string{"PATH": ""}},
		{"BASH_ENV", "ls", "", map[string]string{"BASH_ENV": "/etc/profile"}},
		{"ENV", "ls", "", map[string]string{"ENV": "/etc/profile"}},
		{"SHELLOPTS", "ls", "", map[string]string{"SHELLOPTS": "xtrace"}},
		{"BASHOPTS", "ls", "", map[string]string{"BASHOPTS": "extglob"}},
		{"exported function", "ls", "", map[string]string{"BASH_FUNC_ls%%": "() { echo not ls; }"}},
		{"SSH_CLIENT (sources .bashrc)", "ls", "", map[string]string{"SSH_CLIENT": "1.2.3.4 1 22"}},
		{"POSIXLY_CORRECT", "ls", "", map[string]string{"POSIXLY_CORRECT": "1"}},
		{"IFS", "ls", "", map[string]string{"IFS": ":"}},
		{"PS4", "ls", "", map[string]string{"PS4": "x"}},
		{"EXECIGNORE", "ls", "", map[string]string{"EXECIGNORE": "*"}},
		{"OLDPWD relative", "ls", "", map[string]string{"OLDPWD": "tmp"}},
		{"LC_ALL", "ls", "", map[string]string{"LC_ALL": "nonsense"}},
		{"SHLVL not a number", "ls", "", map[string]string{"SHLVL": "x"}},
		{"SHLVL too high", "ls", "", map[string]string{"SHLVL": "999"}},
		{"SHLVL negative", "ls", "", map[string]string{"SHLVL": "-1"}},
		{"SHLVL leading zero", "ls", "", map[string]string{"SHLVL": "03"}},
		{"SHLVL empty", "ls", "", map[string]string{"SHLVL": ""}},
		{"relative working directory", "ls", ".", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cwd := tt.cwd
			if cwd == "." {
				// shellCommand checks that it exists; the direct path needs it absolute.
				shell, err := s.shellCommand("ls", "", nil, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				shell.Dir = "."
				if s.directCommand("ls", shell) != nil {
					t.Fatal("runs without the shell")
				}
				return
			}
			shell, err := s.shellCommand(tt.script, cwd, tt.envs, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if direct := s.directCommand(tt.script, shell); direct != nil {
				t.Fatalf("%q runs %v without the shell", tt.script, direct.Args)
			}
		})
	}
	t.Run("no probe", func(t *testing.T) {
		s2, err := New(Config{StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		<-s2.probeDone
		s2.setDirectExec(false)
		shell, _ := s2.shellCommand("ls", "", nil, nil, nil)
		if s2.directCommand("ls", shell) != nil {
			t.Fatal("runs without the shell without a probe")
		}
	})
	t.Run("other shell", func(t *testing.T) {
		shell, _ := s.shellCommand("ls", "", nil, nil, nil)
		shell.Path = "/bin/sh"
		if s.directCommand("ls", shell) != nil {
			t.Fatal("runs without the shell when the shell is not the probed bash")
		}
	})
}

// TestProgramEnvSHLVL checks the level arithmetic for both kinds of bash.
func TestProgramEnvSHLVL(t *testing.T) {
	for _, tt := range []struct {
		env        []string
		keepsLevel bool
		want       string
	}{
		{nil, true, "SHLVL=0"},
		{nil, false, "SHLVL=1"},
		{[]string{"SHLVL=4"}, true, "SHLVL=4"},
		{[]string{"SHLVL=4"}, false, "SHLVL=5"},
	} {
		got, ok := programEnv(tt.env, "/", "/bin/x", tt.keepsLevel, false)
		if !ok || !cmp.Equal(got, []string{"PWD=/", tt.want, "_=/bin/x"}) {
			t.Errorf("programEnv(%v, keepsLevel %v) = %v, %v; want %s", tt.env, tt.keepsLevel, got, ok, tt.want)
		}
	}
}
