// Command sandgate is Caddy with sandgate's modules compiled in: `sandgate run` serves the
// gateway with the default Caddyfile (configured by SANDGATE_* environment variables),
// and every other Caddy subcommand works as in Caddy.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	// WebSockets over HTTP/2: must initialise before net/http (see the package).
	_ "github.com/sandgate/sandgate/caddy/h2websocket"
	"github.com/sandgate/sandgate/caddy/modules"
	"github.com/sandgate/sandgate/gateway"
)

func main() {
	if err := splitListen(); err != nil {
		fmt.Fprintln(os.Stderr, "sandgate:", err)
		os.Exit(2)
	}
	// The Caddyfile's {$SANDGATE_ADMIN:off} takes its default only for an unset
	// variable; an empty one would turn on Caddy's default admin endpoint.
	if v, ok := os.LookupEnv("SANDGATE_ADMIN"); ok && v == "" {
		os.Unsetenv("SANDGATE_ADMIN")
	}
	if len(os.Args) > 1 && os.Args[1] == "version" {
		_, full := caddy.Version()
		fmt.Printf("sandgate %s (Caddy %s)\n", gateway.Version, full)
		return
	}
	// The gateway's files (the default Caddyfile, the embedded store's cluster id, Caddy's
	// storage and its locks, a log file a Caddyfile names) are no other local user's to
	// read. What sandboxes get from it goes through the engine, with modes of its own.
	// The client subcommands keep the user's umask (a `cp` download is the user's file).
	if len(os.Args) > 1 && (os.Args[1] == "run" || os.Args[1] == "start") {
		ownerOnlyFiles()
	}
	// Help, usage lines and the shell completions (`sandgate completion bash`) name the
	// binary as users call it.
	caddy.CustomBinaryName = "sandgate"
	if err := useDefaultCaddyfile(); err != nil {
		fmt.Fprintln(os.Stderr, "sandgate:", err)
		os.Exit(1)
	}
	caddycmd.Main()
}

// splitListen turns SANDGATE_LISTEN (host:port, default :8080) into the two variables the
// default Caddyfile uses, so that `SANDGATE_LISTEN=127.0.0.1:9000 sandgate run` binds there.
func splitListen() error {
	listen := os.Getenv("SANDGATE_LISTEN")
	if listen == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("SANDGATE_LISTEN=%q: want host:port or :port: %w", listen, err)
	}
	if os.Getenv("SANDGATE_LISTEN_HOST") == "" {
		os.Setenv("SANDGATE_LISTEN_HOST", host)
	}
	if os.Getenv("SANDGATE_LISTEN_PORT") == "" {
		os.Setenv("SANDGATE_LISTEN_PORT", port)
	}
	return nil
}

// useDefaultCaddyfile points run, start, adapt and validate at the embedded default
// Caddyfile when neither --config nor a Caddyfile in the working directory is given.
func useDefaultCaddyfile() error {
	if len(os.Args) < 2 || !slices.Contains([]string{"run", "start", "adapt", "validate"}, os.Args[1]) {
		return nil
	}
	for _, a := range os.Args[2:] {
		if a == "--config" || a == "-c" || len(a) > 9 && a[:9] == "--config=" {
			return nil
		}
	}
	if _, err := os.Stat("Caddyfile"); err == nil {
		return nil
	}
	path, err := writeDefaultCaddyfile()
	if err != nil {
		return fmt.Errorf("write default Caddyfile: %w", err)
	}
	os.Args = append(os.Args, "--config", path, "--adapter", "caddyfile")
	return nil
}

// writeDefaultCaddyfile keeps the embedded Caddyfile in the user's cache directory under
// a name that carries its hash, so that every run of one version reuses one file instead
// of leaving a new one behind. It is written to a temporary name and renamed, so that
// processes starting at once never read half of it.
func writeDefaultCaddyfile() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "sandgate")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	sum := sha256.Sum256(modules.DefaultCaddyfile)
	path := filepath.Join(dir, "Caddyfile-"+hex.EncodeToString(sum[:8]))
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, modules.DefaultCaddyfile) {
		return path, nil
	}
	tmp, err := os.CreateTemp(dir, "Caddyfile-*.tmp")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(modules.DefaultCaddyfile)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return path, nil
}
