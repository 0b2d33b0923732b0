package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// TestAdaptHoldsNoSecrets: `sandgate adapt` of the default Caddyfile names the secret
// settings by their placeholders and holds neither the API key nor a Redis password;
// the admin API is off and the config is never persisted.
func TestAdaptHoldsNoSecrets(t *testing.T) {
	home := t.TempDir()
	key, password := "k-"+randomHex(16), "pw-"+randomHex(16)
	cmd := exec.Command(filepath.Join(binDir, "sandgate"), "adapt")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CACHE_HOME="+home, "XDG_CONFIG_HOME="+home,
		"SANDGATE_API_KEY="+key, "SANDGATE_REDIS_URL=redis://:"+password+"@127.0.0.1:1/0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sandgate adapt: %v\n%s", err, out)
	}
	cfg := string(out)
	for name, secret := range map[string]string{"the API key": key, "the Redis password": password} {
		if strings.Contains(cfg, secret) {
			t.Errorf("the adapted config holds %s:\n%s", name, cfg)
		}
	}
	for _, want := range []string{`"api_key":"{env.SANDGATE_API_KEY}"`, `"redis_url":"{env.SANDGATE_REDIS_URL}"`, `"disabled":true`, `"persist":false`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("the adapted config lacks %s:\n%s", want, cfg)
		}
	}
}

// TestLocalReaders: a gateway started with the defaults (no admin setting, the embedded
// store) listens only on its HTTP port and the store's loopback port, not on Caddy's
// admin port 2019; the store refuses a client without the password (raw RESP); no
// autosave file is written; the log holds no key; and no file the gateway, `make run`
// (scripts/run.sh) or the CLI writes can be read, nor a directory of theirs listed, by
// another local user.
func TestLocalReaders(t *testing.T) {
	e := newEnv(t, nil)
	home := t.TempDir()
	// SANDGATE_ADMIN= (empty) is the default, as if it were unset.
	g := e.startGateway("SANDGATE_ADMIN=", "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_CACHE_HOME="+filepath.Join(home, "cache"))
	t.Run("the gateway's files are its user's alone", func(t *testing.T) {
		// The default Caddyfile (cache), the embedded store's cluster id and lock (config).
		ownerOnly(t, home, "cache/sandgate/Caddyfile-*", "config/sandgate/embedded-*/*/cluster-id", "config/sandgate/embedded-*/*/lock")
	})
	t.Run("make run and the CLI write nothing another local user reads", func(t *testing.T) {
		makeRunReaders(t, e)
	})
	if r := g.do("GET", "/v1/sandboxes", nil); r.Status != 200 { // the store answers the gateway
		t.Fatalf("list sandboxes: %d %s", r.Status, r.Body)
	}

	_, httpPort, _ := net.SplitHostPort(g.Addr)
	listeners := listeningSockets(t, g.proc.Pid())
	t.Logf("gateway pid %d listens on %v", g.proc.Pid(), listeners)
	var storeAddrs []string
	for _, addr := range listeners {
		host, port, _ := net.SplitHostPort(addr)
		switch {
		case port == "2019":
			t.Errorf("the gateway listens on the admin port: %s", addr)
		case port == httpPort:
		case !net.ParseIP(host).IsLoopback():
			t.Errorf("the gateway listens on %s beyond its HTTP port", addr)
		default:
			storeAddrs = append(storeAddrs, addr)
		}
	}
	if len(storeAddrs) == 0 {
		t.Fatalf("no loopback listener besides the HTTP port: where is the embedded store? %v", listeners)
	}
	for _, addr := range storeAddrs {
		reply := rawRESP(t, addr, "*1\r\n$4\r\nPING\r\n", "*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
		for _, line := range reply {
			if !strings.HasPrefix(line, "-NOAUTH") {
				t.Errorf("%s answered %q to a client without the password, want -NOAUTH", addr, line)
			}
		}
	}

	found := ""
	filepath.Walk(home, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Name() == "autosave.json" {
			found = path
		}
		return nil
	})
	if found != "" {
		b, _ := os.ReadFile(found)
		t.Errorf("Caddy saved its config to %s (holds the key: %v)", found, strings.Contains(string(b), e.APIKey))
	}
	if strings.Contains(g.proc.Logs(), e.APIKey) {
		t.Errorf("the gateway's log holds the API key")
	}
}

// listeningSockets lists the TCP addresses process pid listens on: its socket inodes
// matched against the LISTEN entries of /proc/net/tcp{,6}.
func listeningSockets(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			out = append(out, decodeProcAddr(t, fields[1]))
		}
		f.Close()
	}
	return out
}

// decodeProcAddr turns /proc/net/tcp's "0100007F:1F90" into "127.0.0.1:8080".
func decodeProcAddr(t *testing.T, s string) string {
	hexIP, hexPort, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(hexPort, 16, 16)
	var ip net.IP
	for i := 0; i+8 <= len(hexIP); i += 8 { // each 32-bit word is little-endian
		w, err := strconv.ParseUint(hexIP[i:i+8], 16, 32)
		if err != nil {
			t.Fatalf("address %q: %v", s, err)
		}
		ip = append(ip, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}

// rawRESP sends each command to addr on one connection and returns the first line of
// each reply.
func rawRESP(t *testing.T, addr string, commands ...string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	rd := bufio.NewReader(c)
	var replies []string
	for _, cmd := range commands {
		if _, err := c.Write([]byte(cmd)); err != nil {
			t.Fatalf("write to %s: %v", addr, err)
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("read from %s: %v", addr, err)
		}
		replies = append(replies, strings.TrimSpace(line))
	}
	return replies
}

// TestAdminOnRequest: SANDGATE_ADMIN=host:port still serves Caddy's admin API (pprof
// for debugging), and the config it serves holds the key's placeholder, not the key.
func TestAdminOnRequest(t *testing.T) {
	e := newEnv(t, nil)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	e.startGateway("SANDGATE_ADMIN="+admin, "HOME="+t.TempDir())
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, _ := get("/debug/pprof/cmdline"); status != 200 {
		t.Errorf("pprof: %d", status)
	}
	status, cfg := get("/config/")
	if status != 200 || !strings.Contains(cfg, "{env.SANDGATE_API_KEY}") {
		t.Errorf("config: %d %s", status, cfg)
	}
	if strings.Contains(cfg, e.APIKey) {
		t.Errorf("the admin API serves the API key")
	}
}

// TestAPIKeyFile: SANDGATE_API_KEY_FILE gives the platform key from a file, with no key
// in the environment at all.
func TestAPIKeyFile(t *testing.T) {
	e := newEnv(t, nil)
	keyFile := filepath.Join(t.TempDir(), "api-key")
	if err := os.WriteFile(keyFile, []byte(e.APIKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := e.startGateway("SANDGATE_API_KEY=", "SANDGATE_API_KEY_FILE="+keyFile)
	if r := g.do("GET", "/v1/sandboxes", nil); r.Status != 200 {
		t.Fatalf("list sandboxes with the key from the file: %d %s", r.Status, r.Body)
	}
	g.APIKey = "k-wrong"
	if r := g.do("GET", "/v1/sandboxes", nil); r.Status != 401 {
		t.Fatalf("list sandboxes with another key: %d %s", r.Status, r.Body)
	}
}

// makeRunReaders runs scripts/run.sh (`make run`) from a copy of the repository's layout
// under umask 022, as a login shell has it, then `sandgate login` as the same user: the
// platform admin key the script generates, the gateway's files and the CLI's stored
// login are 0600 in 0700 directories. A second run over a .sandgate an older script left
// readable (0755, the key 0644) keeps the key and takes the modes back.
func makeRunReaders(t *testing.T, e *env) {
	root, home := t.TempDir(), t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	version, err := os.ReadFile(filepath.Join("..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	// The checkout's own files are made owner-only here, so that whatever else under
	// root grants anything to others was written by `make run`.
	for _, dir := range []string{"scripts", "bin"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for name, f := range map[string]struct {
		data []byte
		mode os.FileMode
	}{
		"scripts/run.sh": {script, 0o700},
		"VERSION":        {version, 0o600},
		// A shell of the user's login: umask 022.
		"start.sh": {[]byte("#!/bin/sh\numask 022\nexec \"$(dirname \"$0\")/scripts/run.sh\" \"$@\"\n"), 0o700},
	} {
		if err := os.WriteFile(filepath.Join(root, name), f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(binDir, "sandgate"), filepath.Join(root, "bin", "sandgate")); err != nil {
		t.Fatal(err)
	}
	userEnv := []string{"HOME=" + home, "XDG_CONFIG_HOME=", "XDG_CACHE_HOME=", "XDG_DATA_HOME="}
	makeRun := func() (*testenv.Sandgate, string) {
		t.Helper()
		// SANDGATE_API_KEY empty: the script makes the key (or reuses the one it kept).
		env := append([]string{"SANDGATE_ADMIN=", "SANDGATE_API_KEY=", "SANDGATE_REDIS_URL=", "SANDGATE_REDIS_PREFIX=" + e.Prefix,
			"SANDGATE_DOCKER_NETWORK=" + e.Network, "SANDGATE_AGENT_BINARY=" + filepath.Join(binDir, "sandbox-agent"),
			"SANDGATE_PULL=never"}, userEnv...)
		proc, err := testenv.StartSandgate(filepath.Join(root, "start.sh"), root, env)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proc.Stop)
		key, err := os.ReadFile(filepath.Join(root, ".sandgate", "api-key"))
		if err != nil || len(key) < 32 {
			t.Fatalf("make run kept no key in .sandgate/api-key (%d bytes): %v", len(key), err)
		}
		return proc, string(key)
	}

	proc, key := makeRun()
	r := testenv.Do(t, &http.Client{Timeout: time.Minute}, proc.Addr, key, "GET", "/v1/sandboxes", nil)
	if r.Status != 200 {
		t.Fatalf("the key make run kept is not the gateway's: %d %s", r.Status, r.Body)
	}
	login := exec.Command(filepath.Join(binDir, "sandgate"), "login", "--url", "http://"+proc.Addr, "--api-key-stdin")
	login.Dir = root
	login.Env = append(append(os.Environ(), "SANDGATE_URL=", "SANDGATE_API_KEY="), userEnv...)
	login.Stdin = strings.NewReader(key + "\n")
	if out, err := login.CombinedOutput(); err != nil {
		t.Fatalf("sandgate login: %v\n%s", err, out)
	}
	ownerOnly(t, root, ".sandgate/api-key")
	ownerOnly(t, home, ".config/sandgate/config.json", ".config/sandgate/embedded-*/*/cluster-id", ".cache/sandgate/Caddyfile-*")
	proc.Stop()

	// As an older `make run` left it.
	if err := os.Chmod(filepath.Join(root, ".sandgate"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, ".sandgate", "api-key"), 0o644); err != nil {
		t.Fatal(err)
	}
	proc, again := makeRun()
	if again != key {
		t.Errorf("a second make run changed the kept key")
	}
	ownerOnly(t, root, ".sandgate/api-key")
	proc.Stop()
}

// ownerOnly checks that everything under dir (not dir itself, which the test made)
// grants nothing to group or others (files 0600 at most, directories 0700 at most), and
// that each glob (relative to dir) names at least one regular file there.
func ownerOnly(t *testing.T, dir string, globs ...string) {
	t.Helper()
	for _, g := range globs {
		matches, _ := filepath.Glob(filepath.Join(dir, g))
		if len(matches) == 0 {
			t.Errorf("nothing matches %s under %s: where was it written?", g, dir)
		}
		for _, m := range matches {
			if fi, err := os.Lstat(m); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("%s is not a regular file: %v", m, err)
			}
		}
	}
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return nil // a link's own mode means nothing
		}
		if perm := fi.Mode().Perm(); path != dir && perm&0o077 != 0 {
			rel, _ := filepath.Rel(dir, path)
			t.Errorf("%s (under %s) has mode %#o: other local users may read it", rel, dir, perm)
		}
		return nil
	})
	if err != nil {
		t.Errorf("walk %s: %v", dir, err)
	}
}
