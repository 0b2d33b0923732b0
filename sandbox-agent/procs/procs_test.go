package procs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

func TestEnvironmentBuild(t *testing.T) {
	t.Setenv("SANDGATE_AGENT_TOKEN", "secret")
	t.Setenv("KEEP_ME", "base")
	e := NewEnvironment()
	e.Set(map[string]string{"POOL": "p", "KEEP_ME": "override", "SANDGATE_X": "dropped", "BAD=KEY": "dropped"})
	env := e.Build(map[string]string{"REQ": "r", "POOL": "request wins", "SANDGATE_Y": "dropped"})
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SANDGATE_") {
			t.Fatalf("leaked %s", kv)
		}
		if k == "KEEP_ME" || k == "POOL" || k == "REQ" {
			got[k] = v
		}
	}
	want := map[string]string{"KEEP_ME": "override", "POOL": "request wins", "REQ": "r"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"POOL": "p", "KEEP_ME": "override"}, e.Extra()); diff != "" {
		t.Fatalf("extra (-want +got):\n%s", diff)
	}
}

// TestEnvironmentVaultTrust: the trust variables are in a process's environment exactly
// while the vault's bundle exists, win over the image's and the tenant's values, and
// yield to a request's own.
func TestEnvironmentVaultTrust(t *testing.T) {
	e := NewEnvironment()
	e.base = []string{"SSL_CERT_FILE=/image/bundle.pem"}
	e.vaultBundle = filepath.Join(t.TempDir(), "ca-bundle.pem")
	e.Set(map[string]string{"NODE_EXTRA_CA_CERTS": "/tenant/ca.pem"})
	trust := func(overrides map[string]string) map[string]string {
		got := map[string]string{}
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
			if v, ok := Lookup(e.Build(overrides), k); ok {
				got[k] = v
			}
		}
		return got
	}
	tests := []struct {
		name      string
		bundle    bool
		overrides map[string]string
		want      map[string]string
	}{
		{"without the vault", false, nil, map[string]string{"SSL_CERT_FILE": "/image/bundle.pem", "NODE_EXTRA_CA_CERTS": "/tenant/ca.pem"}},
		{"with the vault", true, nil, agentproto.VaultTrustEnv()},
		{"a request's own value", true, map[string]string{"SSL_CERT_FILE": "/req.pem"},
			map[string]string{"SSL_CERT_FILE": "/req.pem", "REQUESTS_CA_BUNDLE": agentproto.VaultBundlePath, "NODE_EXTRA_CA_CERTS": agentproto.VaultCAPath}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = os.Remove(e.vaultBundle)
			if tt.bundle {
				if err := os.WriteFile(e.vaultBundle, []byte("roots"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tt.want, trust(tt.overrides)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExitCodeAndGroups(t *testing.T) {
	tests := []struct {
		name   string
		script string
		signal syscall.Signal
		want   int
	}{
		{"success", "exit 0", 0, 0},
		{"failure", "exit 7", 0, 7},
		{"killed", "sleep 10", syscall.SIGKILL, 137},
		{"terminated", "sleep 10", syscall.SIGTERM, 143},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tt.script)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := Start(cmd); err != nil {
				t.Fatal(err)
			}
			if !Tracked(cmd.Process.Pid) {
				t.Fatal("started child is not tracked")
			}
			if tt.signal != 0 {
				time.Sleep(50 * time.Millisecond)
				if err := KillGroup(cmd.Process.Pid, tt.signal); err != nil {
					t.Fatal(err)
				}
			}
			err := Wait(cmd)
			if got := ExitCode(cmd.ProcessState, err); got != tt.want {
				t.Fatalf("exit code %d, want %d", got, tt.want)
			}
			if Tracked(cmd.Process.Pid) {
				t.Fatal("waited child still tracked")
			}
		})
	}
	if KillGroup(1, syscall.SIGTERM) == nil || KillGroup(0, syscall.SIGTERM) == nil {
		t.Fatal("KillGroup accepted a group <= 1")
	}
}

func TestKillTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 100 & sleep 100 & wait; echo survived")
	out := &strings.Builder{}
	cmd.Stdout = out
	if err := Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(2 * time.Second)
	for len(Descendants(cmd.Process.Pid)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("children never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	KillTree(cmd.Process.Pid, syscall.SIGKILL)
	if err := Wait(cmd); err != nil {
		t.Fatalf("the shell itself should survive KillTree: %v", err)
	}
	if out.String() != "survived\n" {
		t.Fatalf("output %q", out.String())
	}
}

func TestParseEnvFile(t *testing.T) {
	lookup := func(k string) string { return map[string]string{"HOME": "/root", "BASE": "/opt"}[k] }
	tests := []struct {
		name string
		file string
		want map[string]string
	}{
		{"plain, trimmed and expanded", "A= x y \nB=$BASE/bin:${HOME}\n", map[string]string{"A": "x y", "B": "/opt/bin:/root"}},
		{"comments and blank lines", "# c\n\n  \nA=1\n", map[string]string{"A": "1"}},
		{"single quotes are literal", `A='$HOME "x" \n'`, map[string]string{"A": `$HOME "x" \n`}},
		{"single quotes span lines", "A='one\ntwo'\nB=3\n", map[string]string{"A": "one\ntwo", "B": "3"}},
		{"double quotes unescape and expand", `A="a\tb\n\"q\" \\ $HOME"`, map[string]string{"A": "a\tb\n\"q\" \\ /root"}},
		{"later entries win", "A=1\nA='2'\n", map[string]string{"A": "2"}},
		{"malformed skipped", "NOEQUALS\n1A=x\nA-B=x\n=x\nOK=y\n", map[string]string{"OK": "y"}},
		{"unterminated skipped", "A=\"open\nB=2\nC='never closed\n", map[string]string{"B": "2"}},
		{"reserved names skipped", "SANDGATE_AGENT_TOKEN=x\nA=1\n", map[string]string{"A": "1"}},
		{"empty value", "A=\n", map[string]string{"A": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParseEnvFile(tt.file, lookup)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnvironmentFile(t *testing.T) {
	t.Setenv(EnvFileVar, "")
	t.Setenv("KEEP_ME", "base")
	path := filepath.Join(t.TempDir(), "envs")
	e := NewEnvironment()
	e.Set(map[string]string{"POOL": "p"})
	e.SetEnvFile(path)
	if err := os.WriteFile(path, []byte("KEEP_ME='file'\nPOOL=file-$POOL\nREQ=file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range e.Build(map[string]string{"REQ": "request"}) {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{EnvFileVar: path, "KEEP_ME": "file", "POOL": "file-p", "REQ": "request"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	e.SetEnvFile("/elsewhere")
	if e.EnvFile() != path {
		t.Fatalf("EnvFile %q after a second SetEnvFile, want the first %q", e.EnvFile(), path)
	}
}
