// Command sandbox-agent is the daemon inside every sandgate sandbox. As PID 1
// (`sandbox-agent init -- <entrypoint...>`) it serves the agent API, runs the sandbox's
// entrypoint, forwards signals to it, reaps orphans and exits with the entrypoint's exit
// code. `serve` runs only the API, `egress` the egress enforcer, `supervise` restarts a
// command that exits (the enforcer's PID 1), and `install DEST`
// copies this binary to DEST (how a Kubernetes init container, whose image has no shell
// or cp, puts the agent into the volume the workload runs it from).
//
// Configuration comes from the environment: SANDGATE_AGENT_ADDR (default
// 0.0.0.0:44772), SANDGATE_AGENT_TOKEN (required in X-EXECD-ACCESS-TOKEN when set) and
// SANDGATE_AGENT_RESERVED_THREADS (OS threads kept for a fork bomb; default 16).
// No SANDGATE_* variable reaches a process the agent starts.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress"
	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultca"
	"github.com/sandgate/sandgate/sandbox-agent/initproc"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const defaultAddr = "0.0.0.0:44772"

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  sandbox-agent init [-- entrypoint [args...]]   run as PID 1: API + entrypoint
  sandbox-agent serve                            run the API only
  sandbox-agent egress [args...]                 run the egress enforcer
  sandbox-agent pause                            hold a network namespace: wait for SIGTERM
  sandbox-agent supervise -- command [args...]   run command, again a second after each exit
  sandbox-agent install DEST                     copy this binary to DEST
  sandbox-agent vault-trust DIR                  write the credential vault CA ($SANDGATE_VAULT_CA_CERT) and the image's roots plus it into DIR
  sandbox-agent version
`)
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.SetPrefix("sandbox-agent: ")
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "init", "serve", "egress":
		// Threads made now survive a workload that uses up the sandbox's pids.
		initproc.ReserveThreads(reservedThreads())
	}
	switch os.Args[1] {
	case "init":
		os.Exit(runInit(os.Args[2:]))
	case "serve":
		os.Exit(runServe())
	case "egress":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := egress.Main(ctx, os.Args[2:]); err != nil {
			log.Print(err)
			os.Exit(1)
		}
	case "supervise":
		os.Exit(supervise(os.Args[2:]))
	case "pause":
		// The only process of a spare network namespace holder (runtimes/docker/holders.go):
		// it does nothing but exist, so that the namespace outlives enforcers that come and go.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		<-ctx.Done()
	case "install":
		if len(os.Args) != 3 {
			usage()
			os.Exit(2)
		}
		if err := install(os.Args[2]); err != nil {
			log.Print(err)
			os.Exit(1)
		}
	case "vault-trust":
		if len(os.Args) != 3 {
			usage()
			os.Exit(2)
		}
		if err := vaultca.WriteTrust(os.Args[2], []byte(os.Getenv(egress.EnvVaultCACert))); err != nil {
			log.Print(err)
			os.Exit(1)
		}
	case "version", "--version", "-v":
		fmt.Println("sandbox-agent " + version)
	case "help", "-h", "--help":
		usage()
	default:
		usage()
		os.Exit(2)
	}
}

// install copies the running executable to dest (mode 0755), through a temporary file
// renamed into place so that a reader never sees half a binary.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: find own executable: %w", err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return fmt.Errorf("install: read %s: %w", self, err)
	}
	tmp := dest + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // the umask must not narrow it
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}

// reservedThreads is SANDGATE_AGENT_RESERVED_THREADS, else initproc.ReservedThreads.
func reservedThreads() int {
	v, ok := os.LookupEnv("SANDGATE_AGENT_RESERVED_THREADS")
	if !ok {
		return initproc.ReservedThreads
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1024 {
		log.Printf("SANDGATE_AGENT_RESERVED_THREADS=%q: want 0 to 1024; reserving %d", v, initproc.ReservedThreads)
		return initproc.ReservedThreads
	}
	return n
}

func listenAddr() string {
	if a := os.Getenv("SANDGATE_AGENT_ADDR"); a != "" {
		return a
	}
	return defaultAddr
}

// startAPI binds the API port and serves it in the background. Binding before the
// entrypoint starts means that the API answers as soon as the sandbox runs.
func startAPI(env *procs.Environment, sup *initproc.Supervisor, ownSandbox bool) (*agent.Server, *http.Server, error) {
	cfg := agent.Config{Token: os.Getenv(agentproto.EnvAgentToken), Env: env, JupyterProbe: ownSandbox}
	if sup != nil {
		cfg.StartEntrypoint = sup.Start
		cfg.SettleEntrypoint = sup.Settle
	}
	// Only PID 1 of the sandbox's PID namespace freezes: every other process there is
	// the sandbox's.
	if ownSandbox && os.Getpid() == 1 {
		cfg.Freezer = &initproc.Freezer{}
	}
	api, err := agent.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	addr := listenAddr()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		api.Close()
		return nil, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("serve: %v", err)
		}
	}()
	return api, srv, nil
}

func shutdown(api *agent.Server, srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	api.Close()
}

var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func runInit(args []string) int {
	var entrypoint []string
	if len(args) > 0 {
		if args[0] != "--" {
			fmt.Fprintln(os.Stderr, "sandbox-agent init: expected -- before the entrypoint")
			usage()
			return 2
		}
		entrypoint = args[1:]
	}
	env := procs.NewEnvironment()
	if len(entrypoint) > 0 {
		if _, err := initproc.Resolve(entrypoint[0], env.Build(nil)); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox-agent: cannot start entrypoint: %v\n", err)
			return 127
		}
	}
	// Subscribe before anything starts so that no signal is lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	if err := initproc.BecomeSubreaper(); err != nil {
		log.Printf("cannot become child subreaper: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go initproc.Reap(ctx)

	sup := initproc.NewSupervisor(env)
	api, srv, err := startAPI(env, sup, true)
	if err != nil {
		log.Print(err)
		return 1
	}
	if len(entrypoint) > 0 {
		if err := sup.Start(entrypoint); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox-agent: cannot start entrypoint: %v\n", err)
			shutdown(api, srv)
			if errors.Is(err, initproc.ErrNotFound) {
				return 127
			}
			return 126
		}
	}
	for {
		select {
		case code := <-sup.Exited():
			shutdown(api, srv)
			return code
		case sig := <-sigs:
			if sup.Signal(sig) {
				continue
			}
			// No entrypoint runs: the agent itself is the sandbox's main process.
			if sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGQUIT {
				shutdown(api, srv)
				return 0
			}
		}
	}
}

func runServe() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	env := procs.NewEnvironment()
	sup := initproc.NewSupervisor(env)
	api, srv, err := startAPI(env, sup, false)
	if err != nil {
		log.Print(err)
		return 1
	}
	<-ctx.Done()
	shutdown(api, srv)
	return 0
}
