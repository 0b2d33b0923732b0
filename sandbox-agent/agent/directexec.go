package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/sandbox-agent/envd"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// A command is a shell script: POST /command runs `bash -c script`. When the script is
// one plain program invocation (`python3 main.py`, `ls -la /tmp`), bash parses it,
// finds the program on PATH and execs it in place of itself: the program gets bash's
// pid, process group, file descriptors and signal dispositions, and bash's exit code is
// the program's. Starting bash for that costs more than the program itself (for `true`
// on the loaded 2-core machine, 2.2 ms of CPU against 1.0 ms for the program alone:
// BenchmarkCommandTrue raw and raw-exec; bash's exec, dynamic linking, some 70
// sigactions and 30 opens of start-up), so the agent execs such a
// program itself, with the argv and environment bash would have given it.
//
// It does so only when it can say for certain what bash would do; anything else goes
// through bash:
//
//   - the shell is bash, and a probe at start-up (probeShell) saw what its exec'd
//     command receives (PWD, SHLVL and _ added, nothing else) and listed its builtins;
//   - the script is words of plain characters separated by blanks (plainWords): no
//     quoting, expansion, redirection, globbing, assignment, comment or separator of any
//     kind, so bash's parse is the split on blanks;
//   - the first word is not a reserved word or a builtin (bash runs those itself),
//     except true and false without arguments, whose programs do the same (no output,
//     exit 0 / 1; only `--help` and `--version` make the coreutils ones differ);
//   - the program resolves like bash resolves it: an absolute path, or the first
//     executable non-directory in the command's own PATH, every element of which up to
//     it absolute (relative, empty and ~ elements depend on bash's rules);
//   - the environment has none of the variables bash reads or rewrites at start-up
//     (shellVariable: BASH_ENV, SHELLOPTS, exported functions, SSH_CLIENT, which makes
//     Debian's bash source ~/.bashrc, …), and programEnv knows what bash does with
//     the ones it sets (PWD, SHLVL, OLDPWD, _);
//   - the program starts. Its exec failing in the child (ENOEXEC for a script without a
//     #! line, which bash runs itself; EACCES for a user that may not run it; a file gone
//     since the lookup) starts the same command through bash, which then does what it
//     always did. No user code runs before an exec succeeds, so nothing happens twice.

// shellTraits is what the probe learned of the shell.
type shellTraits struct {
	shell string
	// builtins are the names bash runs itself: its builtins and reserved words.
	builtins map[string]bool
	// keepsLevel is whether bash hands the program the SHLVL it was given (bash 5.1 and
	// later undo their own increment before the exec) rather than one more.
	keepsLevel bool
}

// bashBuiltins are bash 5.2's builtins and reserved words, in case the probe's list
// lacks some (the probe's list is added to it, never the reverse).
var bashBuiltins = strings.Fields(`. : [ alias bg bind break builtin caller cd command compgen
	complete compopt continue declare dirs disown echo enable eval exec exit export false fc
	fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd
	read readarray readonly return set shift shopt source suspend test times trap true type
	typeset ulimit umask unalias unset wait
	if then else elif fi case esac for select while until do done in function time { } ! [[ ]]
	coproc`)

// programLikeBuiltin are builtins whose program does exactly what the builtin does when
// given no arguments.
var programLikeBuiltin = map[string]bool{"true": true, "false": true}

// plainWords splits script into its words when bash would parse it as one simple command
// of literal words with the first naming a program, and returns nil otherwise.
func plainWords(script string, builtins map[string]bool) []string {
	var words []string
	start := -1
	for i := 0; i <= len(script); i++ {
		if i == len(script) || script[i] == ' ' || script[i] == '\t' {
			if start >= 0 {
				words = append(words, script[start:i])
				start = -1
			}
			continue
		}
		if !plainByte(script[i]) {
			return nil
		}
		if start < 0 {
			start = i
		}
	}
	if len(words) == 0 {
		return nil
	}
	first := words[0]
	// A first word starting with - or + would be an option to bash itself (bash -c -x),
	// one with = an assignment, one with % a job; a name bash runs itself is not a program.
	if c := first[0]; !(isAlnum(c) || c == '_' || c == '/') || strings.ContainsAny(first, "=%") {
		return nil
	}
	if builtins[first] && !(programLikeBuiltin[first] && len(words) == 1) {
		return nil
	}
	return words
}

// plainByte reports whether c means itself to bash's parser wherever it stands in a
// word (= and % only after the first word; plainWords checks that).
func plainByte(c byte) bool {
	if isAlnum(c) {
		return true
	}
	switch c {
	case '_', '-', '.', '/', ':', ',', '+', '@', '=', '%':
		return true
	}
	return false
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// shellVariable reports whether bash reads or rewrites the variable name at start-up, so
// that the environment its program gets may differ from the one bash got (or bash may do
// something else first: source a file, trace, warn).
func shellVariable(name string) bool {
	for _, p := range []string{"BASH", "HIST", "COMP_", "READLINE_"} {
		if strings.HasPrefix(name, p) { // BASH_ENV, BASHOPTS, BASH_FUNC_f%% (functions), …
			return true
		}
	}
	switch name {
	case "ENV", "SHELLOPTS", "POSIXLY_CORRECT", "SSH_CLIENT", "SSH2_CLIENT", "IFS",
		"PS0", "PS1", "PS2", "PS3", "PS4", "PPID", "UID", "EUID", "GROUPS", "RANDOM", "SRANDOM",
		"SECONDS", "LINENO", "OPTIND", "OPTERR", "OPTARG", "EPOCHSECONDS", "EPOCHREALTIME",
		"EXECIGNORE", "FUNCNAME", "FUNCNEST", "DIRSTACK", "PIPESTATUS", "LC_ALL",
		"GLOBIGNORE", "GLOBSORT", "CDPATH", "TIMEFORMAT", "COPROC", "INPUTRC", "CHILD_MAX":
		return true
	}
	return false
}

// resolveProgram finds word the way bash does: as given when it is an absolute path,
// else in the PATH elements of pathList. ok is false whenever bash might do otherwise.
func resolveProgram(word, pathList string, havePath bool) (path string, ok bool) {
	if strings.Contains(word, "/") {
		if !filepath.IsAbs(word) || !executableFile(word) {
			return "", false
		}
		return word, true
	}
	if !havePath {
		return "", false // bash would use its built-in default PATH
	}
	for _, dir := range strings.Split(pathList, ":") {
		if !strings.HasPrefix(dir, "/") {
			return "", false // empty (the working directory), relative or ~
		}
		p := dir + "/" + word // bash's sh_makepath
		if strings.HasSuffix(dir, "/") {
			p = dir + word
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue
			}
			return "", false
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS) != nil {
			// bash would go on looking and, failing, report this one (126).
			return "", false
		}
		return p, true
	}
	return "", false // not found: bash's 127 and message
}

func executableFile(p string) bool {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return false
	}
	return unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS) == nil
}

// programEnv returns env as bash passes it to the program it execs from workDir (a
// physical path): PWD set to it, SHLVL as bash leaves it, _ the program's path, OLDPWD
// only when it names a directory. ok is false when bash would change more than that, or
// when what it would do depends on the user the command runs as (asUser).
func programEnv(env []string, workDir, program string, keepsLevel, asUser bool) (out []string, ok bool) {
	out = make([]string, 0, len(env)+3)
	level := 0
	pwd := workDir
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case shellVariable(k):
			return nil, false
		case k == "PWD":
			// bash keeps an absolute PWD that names its working directory (through
			// links or not: same device and inode), else sets its own.
			if v == workDir {
				continue
			}
			if asUser {
				return nil, false // its stat would run as the user
			}
			if strings.HasPrefix(v, "/") && sameFile(v, workDir) {
				pwd = v
			}
			continue
		case k == "SHLVL":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 990 || strconv.Itoa(n) != v {
				return nil, false // bash's own parse, clamp and warning
			}
			level = n
			continue
		case k == "_":
			continue
		case k == "OLDPWD":
			// bash drops one that is not a directory (its stat runs as the user).
			if asUser || !filepath.IsAbs(v) {
				return nil, false
			}
			if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
				continue
			}
		}
		out = append(out, kv)
	}
	level++ // bash's increment at start
	if keepsLevel {
		level-- // undone before it execs its last command
	}
	return append(out, "PWD="+pwd, "SHLVL="+strconv.Itoa(level), "_="+program), true
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// physicalDir is the working directory a process started in dir has, as getcwd reports
// it: dir with symbolic links resolved, or the agent's own when dir is empty.
func physicalDir(dir string) (string, bool) {
	if dir == "" {
		wd, err := unix.Getwd() // the kernel's, not os.Getwd's $PWD
		return wd, err == nil
	}
	if !filepath.IsAbs(dir) {
		return "", false
	}
	p, err := filepath.EvalSymlinks(dir)
	return p, err == nil
}

// directCommand returns a command that runs script's program without bash, or nil when
// script must go through bash (see the comment at the top of this file). shell is the
// same command through bash: its environment is the one bash would get.
func (s *Server) directCommand(script string, shell *exec.Cmd) *exec.Cmd {
	t := s.shellTraits.Load()
	if t == nil || t.shell != shell.Path {
		return nil
	}
	words := plainWords(script, t.builtins)
	if words == nil {
		return nil
	}
	pathList, havePath := procs.Lookup(shell.Env, "PATH")
	program, ok := resolveProgram(words[0], pathList, havePath)
	if !ok {
		return nil
	}
	workDir, ok := physicalDir(shell.Dir)
	if !ok {
		return nil
	}
	asUser := shell.SysProcAttr != nil && shell.SysProcAttr.Credential != nil
	env, ok := programEnv(shell.Env, workDir, program, t.keepsLevel, asUser)
	if !ok {
		return nil
	}
	cmd := exec.Command(program)
	cmd.Args = words
	cmd.Env = env
	cmd.Dir = shell.Dir
	cmd.Stdin = shell.Stdin
	cmd.SysProcAttr = shell.SysProcAttr
	return cmd
}

// plainCommand reads script as directCommand does, for the program a login shell would
// exec with pathList as its PATH (envd's `bash -l -c`, whose environment envd learns by
// a probe of its own).
func (s *Server) plainCommand(script, pathList string) (envd.PlainCommand, bool) {
	t := s.shellTraits.Load()
	if t == nil {
		return envd.PlainCommand{}, false
	}
	words := plainWords(script, t.builtins)
	if words == nil {
		return envd.PlainCommand{}, false
	}
	program, ok := resolveProgram(words[0], pathList, true)
	if !ok {
		return envd.PlainCommand{}, false
	}
	return envd.PlainCommand{Argv: words, Program: program, KeepsLevel: t.keepsLevel}, true
}

// probeShell runs the shell twice to learn what plainWords and programEnv need: its
// builtins and reserved words (compgen), and the environment its exec'd program gets
// (`bash -c env` with a known environment). Any surprise disables the direct path.
func probeShell(shell string, env []string) (*shellTraits, error) {
	if !procs.IsBash(shell) {
		return nil, fmt.Errorf("shell %s is not bash", shell)
	}
	t := &shellTraits{shell: shell, builtins: map[string]bool{}}
	for _, b := range bashBuiltins {
		t.builtins[b] = true
	}
	out, err := runProbe(shell, "compgen -b; compgen -k", env)
	if err != nil {
		return nil, err
	}
	names := strings.Fields(string(out))
	if len(names) < 20 {
		return nil, fmt.Errorf("compgen listed %d names", len(names))
	}
	for _, n := range names {
		t.builtins[n] = true
	}

	pathList, havePath := procs.Lookup(env, "PATH")
	envProgram, ok := resolveProgram("env", pathList, havePath)
	if !ok {
		return nil, errors.New("no env program on PATH")
	}
	probeEnv := []string{"PATH=" + pathList, "SHLVL=7"}
	out, err = runProbe(shell, "env", probeEnv)
	if err != nil {
		return nil, err
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for _, keepsLevel := range []bool{true, false} {
		want, _ := programEnv(probeEnv, "/", envProgram, keepsLevel, false)
		if sameSet(got, want) {
			t.keepsLevel = keepsLevel
			return t, nil
		}
	}
	return nil, fmt.Errorf("bash -c env gave %q", got)
}

// runProbe runs `shell -c script` in / with env and returns its stdout.
func runProbe(shell, script string, env []string) ([]byte, error) {
	var stdout bytes.Buffer
	cmd := exec.Command(shell, "-c", script)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdout = &stdout
	if procs.DevNull != nil {
		cmd.Stdin = procs.DevNull
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := procs.Start(cmd); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(5*time.Second, func() { _ = procs.KillGroup(cmd.Process.Pid, syscall.SIGKILL) })
	err := procs.Wait(cmd)
	timer.Stop()
	if err != nil {
		return nil, fmt.Errorf("%s -c %q: %w", shell, script, err)
	}
	return stdout.Bytes(), nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s] == 0 {
			return false
		}
		seen[s]--
	}
	return true
}

// traitsSlot holds the probe's result; nil (before it, or when it failed) means every
// command goes through bash.
type traitsSlot = atomic.Pointer[shellTraits]

// setDirectExec replaces what the probe found; tests use it to compare both paths.
func (s *Server) setDirectExec(on bool) {
	if !on {
		s.shellTraits.Store(nil)
		return
	}
	t, err := probeShell(procs.Shell(), s.env.Build(nil))
	if err != nil {
		s.logger.Printf("sandbox-agent: commands all go through the shell: %v", err)
	}
	s.shellTraits.Store(t)
}

// viaShell is the shell's form of direct, with its input and outputs: what runs when
// the direct exec fails.
func viaShell(direct, shell *exec.Cmd) *exec.Cmd {
	shell.Stdin, shell.Stdout, shell.Stderr = direct.Stdin, direct.Stdout, direct.Stderr
	return shell
}
