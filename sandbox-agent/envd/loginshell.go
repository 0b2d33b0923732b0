package envd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// The E2B SDKs run every command as `/bin/bash -l -c <command>`. A login shell sources
// /etc/profile and the user's profile files before the command, which costs more than
// most commands. When the command is one plain program invocation, bash ends by
// exec'ing that program with the environment the profile files left: the Service execs
// the program itself, with that environment, learned once by a probe and kept until a
// file a login shell reads changes.
//
// The probe is the same login shell (same bash, user, working directory and
// environment) running `exec env -0` after listing what the profile files left that
// would make bash do more than exec the program: functions, traps, aliases in effect,
// hashed programs. The program goes direct only when:
//
//   - the agent's analysis (Config.PlainCommand) says bash would exec one program for the
//     script, looked up in the probed PATH;
//   - the probe printed nothing else on stdout or stderr, left no function, trap or
//     expanded alias, did not hash the program elsewhere, and its PWD names the
//     command's working directory (the profile files did not cd);
//   - the probe is current: none of /etc/profile, /etc/profile.d and its files,
//     /etc/bash.bashrc, /etc/bashrc, ~/.bash_profile, ~/.bash_login, ~/.profile,
//     ~/.bashrc, ~/bin and ~/.local/bin (the directories the stock ~/.profile adds to
//     PATH when they exist) changed size, mtime, ctime or inode since it ran. No probe
//     runs while one of them changed within settleTime (a further change in the same
//     clock tick would not show in their times): until then commands go through bash;
//   - the program starts: an exec failing in the child (a script without #!, a program
//     the user may not run) starts the login shell instead, before anything ran.
//
// What the probe cannot see is a profile file whose result depends on something else
// (a file it sources from elsewhere, the time, a random number) or that has side
// effects: those run once per probe rather than once per command.

// PlainCommand is the agent's reading of a bash script that is one plain program
// invocation: bash would exec Program with Argv.
type PlainCommand struct {
	Argv    []string
	Program string
	// KeepsLevel is whether bash hands the program the SHLVL it was given (bash 5.1
	// and later undo their own increment before exec'ing a -c script's only command).
	KeepsLevel bool
}

// loginProbe is what a login shell leaves for the program it execs.
type loginProbe struct {
	// done is closed once the probe has run; the fields below are set then.
	done chan struct{}

	// env is the environment `exec env` received: the program's, except for _.
	env []string
	// hashed are the programs the profile files hashed, by name.
	hashed map[string]string
	// stamp is the version of the files the login shell read (loginFiles.stamp), taken
	// settled: while it is current, they are unchanged.
	stamp string
	// at is when the probe ran: one that failed is run again once loginProbeRetry has
	// passed (its shell may have been slow, the machine busy), not kept until a profile
	// file changes.
	at time.Time
}

// loginProbeTimeout is how long a probe may run before it is killed (and has failed).
var loginProbeTimeout = 5 * time.Second

// loginProbeRetry is how long a failed probe is kept before the next command of its
// user and directory probes again.
var loginProbeRetry = 30 * time.Second

// loginProbes caches probes by user, working directory and environment.
type loginProbes struct {
	files loginFiles

	mu sync.Mutex
	m  map[string]*loginProbe
}

// maxLoginProbes bounds the cache; it is emptied when full.
const maxLoginProbes = 64

// get returns the current probe of shell's login shell, running it (once for calls
// that come together) when there is none or a file it read has changed.
func (l *loginProbes) get(shell *exec.Cmd) *loginProbe {
	home, _ := procs.Lookup(shell.Env, "HOME")
	stamp, settled := l.files.stamp(home)
	key := loginKey(shell)
	l.mu.Lock()
	probe := l.m[key]
	if probe != nil && probe.stamp == stamp && !probe.retryDue() {
		l.mu.Unlock()
		<-probe.done
		return probe
	}
	if !settled {
		// A file changed too recently for its times to show a further change: a probe
		// run now could not be trusted later. The command goes through bash.
		l.mu.Unlock()
		return &loginProbe{}
	}
	if l.m == nil || len(l.m) >= maxLoginProbes {
		l.m = map[string]*loginProbe{}
	}
	probe = &loginProbe{done: make(chan struct{}), stamp: stamp}
	l.m[key] = probe
	l.mu.Unlock()
	// Without env every command goes through bash until a profile file changes.
	probe.env, probe.hashed, _ = probeLogin(shell)
	probe.at = time.Now()
	close(probe.done)
	return probe
}

// retryDue reports whether probe ended without an environment long enough ago to run
// again (one still running is not due).
func (p *loginProbe) retryDue() bool {
	select {
	case <-p.done:
		return p.env == nil && time.Since(p.at) >= loginProbeRetry
	default:
		return false
	}
}

// loginScript returns the script of a `bash -l -c script` process config.
func loginScript(config interface {
	GetCmd() string
	GetArgs() []string
}) (string, bool) {
	args := config.GetArgs()
	if !procs.IsBash(config.GetCmd()) || len(args) != 3 || args[0] != "-l" || args[1] != "-c" {
		return "", false
	}
	return args[2], true
}

// directLogin returns the command that runs shell's script's program without the login
// shell, or nil when it must go through bash. shell is `bash -l -c script` as it would
// run.
func (s *Service) directLogin(script string, shell *exec.Cmd) *exec.Cmd {
	if s.cfg.PlainCommand == nil || !filepath.IsAbs(shell.Path) {
		return nil
	}
	probe := s.logins.get(shell)
	if probe.env == nil {
		return nil
	}
	path, _ := procs.Lookup(probe.env, "PATH")
	plain, ok := s.cfg.PlainCommand(script, path)
	if !ok {
		return nil
	}
	if p, hashed := probe.hashed[plain.Argv[0]]; hashed && p != plain.Program {
		return nil
	}
	env := make([]string, 0, len(probe.env))
	for _, kv := range probe.env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "_":
			continue
		case "SHLVL":
			if !plain.KeepsLevel {
				// `exec` undid bash's increment; an old bash's -c does not.
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil
				}
				kv = "SHLVL=" + strconv.Itoa(n+1)
			}
		}
		env = append(env, kv)
	}
	cmd := exec.Command(plain.Program)
	cmd.Args = plain.Argv
	cmd.Env = append(env, "_="+plain.Program)
	cmd.Dir = shell.Dir
	cmd.SysProcAttr = shell.SysProcAttr
	return cmd
}

// loginKey is everything of shell that a login shell's result may depend on.
func loginKey(shell *exec.Cmd) string {
	var b strings.Builder
	b.WriteString(shell.Path)
	b.WriteByte(0)
	b.WriteString(shell.Dir)
	b.WriteByte(0)
	if a := shell.SysProcAttr; a != nil && a.Credential != nil {
		fmt.Fprintf(&b, "%d:%d:%v", a.Credential.Uid, a.Credential.Gid, a.Credential.Groups)
	}
	for _, kv := range shell.Env {
		b.WriteByte(0)
		b.WriteString(kv)
	}
	return b.String()
}

// loginDirs are the directories whose files a login shell reads: /etc/profile sources
// /etc/profile.d/*, and the stock ~/.profile adds ~/bin and ~/.local/bin to PATH when
// they exist.
func loginDirs(etc, home string) []loginDir {
	dirs := []loginDir{
		{path: etc, names: []string{"profile", "bash.bashrc", "bashrc"}},
		{path: filepath.Join(etc, "profile.d")},
	}
	if home != "" {
		dirs = append(dirs,
			loginDir{path: home, names: []string{".bash_profile", ".bash_login", ".profile", ".bashrc", "bin"}},
			loginDir{path: filepath.Join(home, ".local"), names: []string{"bin"}})
	}
	return dirs
}

// loginDir is a directory a login shell reads files from.
type loginDir struct {
	path string
	// names are the files read there; nil means every entry.
	names []string
}

// loginFiles stamps the files a login shell reads, and keeps, per directory, which of
// them exist: a stamp stats every directory and every file that exists, and lists a
// directory again only when its version changed. A name absent from a directory cannot
// appear without changing the directory's mtime and ctime; a file that exists is
// stat'ed every time, since writing it changes only the file.
type loginFiles struct {
	// etc is /etc, or a test's own.
	etc string

	mu       sync.Mutex
	listings map[string]dirListing
}

// dirListing is which names of a directory existed when its version was version.
type dirListing struct {
	version fileVersion
	// settled is whether version proves the listing current (fileVersion.settledBy).
	settled bool
	present []string
}

// maxDirListings bounds the listings kept; they are dropped when full.
const maxDirListings = 64

// stamp identifies the current version of every file a login shell of the user whose
// HOME is home reads. settled is whether the stamp being unchanged later proves those
// files unchanged: false when one of them changed too recently for its ctime to tell
// a further change apart (settleTime).
func (l *loginFiles) stamp(home string) (stamp string, settled bool) {
	at := time.Now()
	settled = true
	b := make([]byte, 0, 512)
	for _, dir := range loginDirs(l.etc, home) {
		b = append(b, dir.path...)
		dirVersion, err := statVersion(dir.path)
		if err != nil {
			// Its creation shows in this stat next time.
			b = append(b, "=-;"...)
			continue
		}
		b = appendVersion(b, dirVersion)
		settled = settled && dirVersion.settledBy(at)
		l.mu.Lock()
		listing, ok := l.listings[dir.path]
		l.mu.Unlock()
		if !ok || listing.version != dirVersion || !listing.settled {
			present, ok := listDir(dir)
			listing = dirListing{version: dirVersion, settled: ok && dirVersion.settledBy(at), present: present}
			settled = settled && ok
			l.mu.Lock()
			if l.listings == nil || len(l.listings) >= maxDirListings {
				l.listings = map[string]dirListing{}
			}
			l.listings[dir.path] = listing
			l.mu.Unlock()
		}
		for _, name := range listing.present {
			b = append(b, name...)
			v, err := statVersion(filepath.Join(dir.path, name))
			if err != nil {
				b = append(b, "=-;"...)
				continue
			}
			b = appendVersion(b, v)
			settled = settled && v.settledBy(at)
		}
	}
	return string(b), settled
}

// listDir returns the names of dir that exist; ok is false when dir could not be
// listed. A name counts as existing unless lstat finds nothing: a dangling symbolic
// link is stat'ed every time, as its target may appear elsewhere.
func listDir(dir loginDir) (present []string, ok bool) {
	if dir.names == nil {
		entries, err := os.ReadDir(dir.path)
		if err != nil {
			return nil, false
		}
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.Name()
		}
		return names, true
	}
	for _, name := range dir.names {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir.path, name), &st); !errors.Is(err, syscall.ENOENT) {
			present = append(present, name)
		}
	}
	return present, true
}

func appendVersion(b []byte, v fileVersion) []byte {
	b = append(b, '=')
	for _, n := range []int64{int64(v.dev), int64(v.ino), v.size, v.mtime.Sec, v.mtime.Nsec, v.ctime.Sec, v.ctime.Nsec} {
		b = strconv.AppendInt(b, n, 10)
		b = append(b, '.')
	}
	b[len(b)-1] = ';'
	return b
}

// probeScript lists what would make the login shell do more than exec a program (each
// line printed is a reason not to skip it; hashed programs are parsed), then a marker,
// then the environment an exec'd program gets.
const probeScript = `declare -F; trap -p; shopt -q expand_aliases && alias; hash -l 2>/dev/null; printf '\0sandgate-login-probe\0'; exec env -0`

const probeMarker = "\x00sandgate-login-probe\x00"

// probeLogin runs the probe as shell would run, and reads its answer: the environment
// of the program and the programs hashed by name.
func probeLogin(shell *exec.Cmd) ([]string, map[string]string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(shell.Path, "-l", "-c", probeScript)
	cmd.Env = shell.Env
	cmd.Dir = shell.Dir
	cmd.Stdin = procs.DevNull
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	attr := syscall.SysProcAttr{Setpgid: true}
	if shell.SysProcAttr != nil {
		attr.Credential = shell.SysProcAttr.Credential
	}
	cmd.SysProcAttr = &attr
	if err := procs.Start(cmd); err != nil {
		return nil, nil, err
	}
	timer := time.AfterFunc(loginProbeTimeout, func() { _ = procs.KillGroup(cmd.Process.Pid, syscall.SIGKILL) })
	err := procs.Wait(cmd)
	timer.Stop()
	if err != nil {
		return nil, nil, fmt.Errorf("login shell probe: %w", err)
	}
	if stderr.Len() > 0 {
		return nil, nil, fmt.Errorf("login shell probe wrote to stderr: %q", stderr.String())
	}
	head, envOut, ok := bytes.Cut(stdout.Bytes(), []byte(probeMarker))
	if !ok || !bytes.HasSuffix(envOut, []byte{0}) {
		return nil, nil, errors.New("login shell probe: no environment")
	}
	hashed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(head), "\n"), "\n") {
		// builtin hash -p /usr/bin/mesg mesg
		f := strings.Fields(line)
		switch {
		case line == "":
		case len(f) == 5 && f[0] == "builtin" && f[1] == "hash" && f[2] == "-p":
			hashed[f[4]] = f[3]
		case len(f) == 4 && f[0] == "trap" && f[1] == "--" && f[2] == "''" && inheritedIgnored(f[3]):
			// A signal ignored when the shell started (the agent runs under nohup, say):
			// bash lists it, and a program the agent execs inherits it ignored alike.
		default:
			return nil, nil, fmt.Errorf("login shell probe: the profile left %q", line)
		}
	}
	env := strings.Split(string(envOut[:len(envOut)-1]), "\x00")
	pwd, _ := procs.Lookup(env, "PWD")
	if !sameDir(pwd, shell.Dir) {
		return nil, nil, fmt.Errorf("login shell probe: working directory %q, not %q", pwd, shell.Dir)
	}
	if slices.ContainsFunc(env, func(kv string) bool { return !strings.Contains(kv, "=") }) {
		return nil, nil, errors.New("login shell probe: malformed environment")
	}
	return env, hashed, nil
}

// inheritedIgnored reports whether the signal named sig (SIGHUP) is ignored in the
// agent's process: the probe, and every program the agent starts, begins with it
// ignored too.
func inheritedIgnored(sig string) bool {
	num := unix.SignalNum(sig)
	if num == 0 {
		return false
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			return err == nil && num <= 64 && bits&(1<<(uint(num)-1)) != 0
		}
	}
	return false
}

func sameDir(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// WarmLoginShell probes the login shell of the default user as a command with no cwd or
// envs of its own would run it, so that the first such command finds it done: the
// agent calls it at start-up, off any request's path.
func (s *Service) WarmLoginShell() {
	u, err := s.lookupUser("")
	if err != nil {
		return
	}
	// The shell as the SDKs name it.
	config := &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"}}
	if _, err := os.Stat(config.Cmd); err != nil {
		return
	}
	if shell, err := s.command(config, u, false); err == nil {
		s.logins.get(shell)
	}
}
