package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	sandgate "github.com/sandgate/sandgate/client"
)

// exit ends the process with code once output is written: Caddy's command runner maps
// every error to 1, and exec must exit with the command's own code.
func exit(code int) {
	os.Stdout.Sync()
	os.Exit(code)
}

func shellQuote(args []string) string {
	if len(args) == 1 {
		return args[0] // one argument is a shell command line as typed
	}
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func setupExec(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var interactive bool
	var cwd string
	var env []string
	var timeout time.Duration
	cmd.Long = `Runs a command in a sandbox, streaming its standard output and error as they come,
and exits with the command's exit code. One argument is a shell command line; several
are quoted into one. With -i the command runs in a pseudo-terminal attached to yours.`
	cmd.Example = `  sandgate exec 3f6c… -- uname -a
  sandgate exec 3f6c… 'cd /src && make test'
  sandgate exec -i 3f6c… -- python3`
	cmd.Args = cobra.MinimumNArgs(2)
	cmd.ValidArgsFunction = g.completeSandboxIDs
	// Flags end at the sandbox id: `sandgate exec <id> ls -l` passes -l to ls.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "run in a pseudo-terminal attached to this one")
	cmd.Flags().StringVarP(&cwd, "workdir", "w", "", "working directory")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop the command after this long")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		envs, err := keyValues("env", env)
		if err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		ctx, cancel := signalContext()
		defer cancel()
		a, err := c.Agent(ctx, args[0])
		if err != nil {
			return err
		}
		command := args[1:]
		if command[0] == "--" { // kept as an argument once flags stopped at the id
			command = command[1:]
		}
		if len(command) == 0 {
			return errors.New("exec: no command after --")
		}
		line := shellQuote(command)
		if interactive {
			code, err := runTerminal(ctx, a, sandgate.PTYRequest{Command: line, Cwd: cwd})
			if err != nil {
				return err
			}
			cancel()
			exit(code)
		}
		stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
		res, err := a.Run(ctx, sandgate.Command{Command: line, Cwd: cwd, Env: envs, Timeout: timeout}, sandgate.Handlers{
			Stdout: func(l string) { fmt.Fprintln(stdout, l) },
			Stderr: func(l string) { fmt.Fprintln(stderr, l) },
		})
		if err != nil {
			if ctx.Err() != nil && res != nil && res.ID != "" {
				// Ctrl-C stops the command, not only the stream.
				ictx, icancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = a.Interrupt(ictx, res.ID)
				icancel()
				exit(130)
			}
			return err
		}
		if res.ExitCode < 0 {
			return errors.New("exec: the stream ended without an exit status")
		}
		if res.ExitCode != 0 {
			cancel()
			exit(res.ExitCode)
		}
		return nil
	}
}

func setupShell(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var shell, cwd string
	cmd.Long = `Opens an interactive terminal in a sandbox, resized with yours. Exit the shell to
leave; the command exits with the shell's code.`
	cmd.Example = `  sandgate shell 3f6c…
  sandgate shell 3f6c… --shell /bin/bash -w /workspace`
	cmd.Args = cobra.ExactArgs(1)
	cmd.ValidArgsFunction = g.completeSandboxIDs
	cmd.Flags().StringVar(&shell, "shell", "", "program to run (default: the sandbox's shell)")
	cmd.Flags().StringVarP(&cwd, "workdir", "w", "", "working directory")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, err := c.Agent(ctx, args[0])
		if err != nil {
			return err
		}
		code, err := runTerminal(ctx, a, sandgate.PTYRequest{Command: shell, Cwd: cwd})
		if err != nil {
			return err
		}
		cancel()
		exit(code)
		return nil
	}
}

// runTerminal attaches this terminal (raw, resized along) to a new PTY in the sandbox
// and returns the process's exit code. Without a terminal on stdin it still works, as a
// pipe: what is typed goes in, what is printed comes out.
func runTerminal(ctx context.Context, a *sandgate.Agent, req sandgate.PTYRequest) (int, error) {
	in := int(os.Stdin.Fd())
	tty := term.IsTerminal(in)
	if tty {
		if w, h, err := term.GetSize(in); err == nil {
			req.Cols, req.Rows = uint16(w), uint16(h)
		}
	}
	t, err := a.OpenPTY(ctx, req)
	if err != nil {
		return 0, err
	}
	defer func() {
		t.Close()
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.DeletePTY(dctx, t.ID)
		cancel()
	}()
	if tty {
		old, err := term.MakeRaw(in)
		if err != nil {
			return 0, err
		}
		defer term.Restore(in, old)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(in); err == nil {
					_ = t.Resize(uint16(w), uint16(h))
				}
			}
		}()
	}
	go func() { _, _ = io.Copy(t, os.Stdin) }()
	_, err = io.Copy(os.Stdout, t)
	if code, ok := t.ExitCode(); ok {
		return code, nil
	}
	if err != nil {
		return 0, fmt.Errorf("terminal: %w", err)
	}
	return 0, errors.New("terminal: closed without an exit status")
}

// remote parses "sandbox:path"; ok is false for a local path.
func remote(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.ContainsAny(id, `/\.`) || !strings.HasPrefix(p, "/") {
		return "", arg, false
	}
	return id, p, true
}

func setupCopy(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var recursive, quiet bool
	cmd.Long = `Copies files between this machine and a sandbox, streamed both ways (any size), with
a progress bar for large files on a terminal. A sandbox path is <sandbox-id>:<absolute path>.
With -r, directories are copied with everything below them.`
	cmd.Example = `  sandgate cp ./data.csv 3f6c…:/workspace/data.csv
  sandgate cp 3f6c…:/workspace/out.png .
  sandgate cp -r ./src 3f6c…:/workspace/src
  sandgate cp -r 3f6c…:/workspace/results ./results`
	cmd.Args = cobra.ExactArgs(2)
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories recursively")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		srcID, src, srcRemote := remote(args[0])
		dstID, dst, dstRemote := remote(args[1])
		if srcRemote == dstRemote {
			return errors.New("cp: exactly one of source and destination is <sandbox>:<path>")
		}
		return g.call(func(ctx context.Context, c *sandgate.Client) error {
			cp := copier{quiet: quiet}
			if dstRemote {
				a, err := c.Agent(ctx, dstID)
				if err != nil {
					return err
				}
				return cp.upload(ctx, a, src, dst, recursive)
			}
			a, err := c.Agent(ctx, srcID)
			if err != nil {
				return err
			}
			return cp.download(ctx, a, src, dst, recursive)
		})
	}
}

type copier struct{ quiet bool }

// progressThreshold is the size from which a transfer shows a progress bar.
const progressThreshold = 1 << 20

func (cp copier) upload(ctx context.Context, a *sandgate.Agent, src, dst string, recursive bool) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		if strings.HasSuffix(dst, "/") {
			dst += filepath.Base(src)
		} else if info, err := a.Stat(ctx, dst); err == nil && info[dst].Type == "directory" {
			dst = path.Join(dst, filepath.Base(src))
		}
		return cp.uploadFile(ctx, a, src, dst, st)
	}
	if !recursive {
		return fmt.Errorf("cp: %s is a directory (use -r)", src)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return a.Mkdir(ctx, target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return cp.uploadFile(ctx, a, p, target, info)
		}
		return nil // symlinks, sockets: skipped
	})
}

func (cp copier) uploadFile(ctx context.Context, a *sandgate.Agent, src, dst string, st fs.FileInfo) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	var bar *progress
	if !cp.quiet && st.Size() >= progressThreshold {
		bar = newProgress(filepath.Base(src), st.Size())
		r = io.TeeReader(f, bar)
	}
	err = a.Upload(ctx, dst, r, st.Mode().Perm())
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return fmt.Errorf("cp %s: %w", src, err)
	}
	return nil
}

func (cp copier) download(ctx context.Context, a *sandgate.Agent, src, dst string, recursive bool) error {
	info, err := a.Stat(ctx, src)
	if err != nil {
		return err
	}
	fi := info[src]
	if fi.Type != "directory" {
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = filepath.Join(dst, path.Base(src))
		}
		return cp.downloadFile(ctx, a, src, dst, fi)
	}
	if !recursive {
		return fmt.Errorf("cp: %s is a directory (use -r)", src)
	}
	entries, err := a.Search(ctx, src, "**")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		rel := strings.TrimPrefix(strings.TrimPrefix(e.Path, src), "/")
		if rel == "" {
			continue
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch e.Type {
		case "directory":
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case "file":
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := cp.downloadFile(ctx, a, e.Path, target, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func (cp copier) downloadFile(ctx context.Context, a *sandgate.Agent, src, dst string, fi sandgate.FileInfo) error {
	body, size, err := a.Download(ctx, src)
	if err != nil {
		return fmt.Errorf("cp %s: %w", src, err)
	}
	defer body.Close()
	mode := fi.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	var w io.Writer = tmp
	var bar *progress
	if !cp.quiet && size >= progressThreshold {
		bar = newProgress(path.Base(src), size)
		w = io.MultiWriter(tmp, bar)
	}
	_, err = io.Copy(w, body)
	if bar != nil {
		bar.finish()
	}
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cp %s: %w", src, err)
	}
	return os.Rename(tmp.Name(), dst)
}

func setupLogs(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var follow bool
	cmd.Long = `Prints the output of a command started in the background (the id is the one
` + "`sandgate exec`" + ` or the SDK printed for it); --follow keeps printing until it ends.`
	cmd.Example = `  sandgate logs 3f6c… 7d1e… --follow`
	cmd.Args = cobra.ExactArgs(2)
	cmd.ValidArgsFunction = g.completeSandboxIDs
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the command ends")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		ctx, cancel := signalContext()
		defer cancel()
		a, err := c.Agent(ctx, args[0])
		if err != nil {
			return err
		}
		cursor := 0
		for {
			out, next, err := a.CommandLogs(ctx, args[1], cursor)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), out)
			cursor = next
			if !follow {
				return nil
			}
			st, err := a.CommandStatus(ctx, args[1])
			if err != nil {
				return err
			}
			if !st.Running {
				out, _, _ := a.CommandLogs(ctx, args[1], cursor)
				fmt.Fprint(cmd.OutOrStdout(), out)
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

func setupPreview(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var ttl time.Duration
	var open bool
	cmd.Long = `Prints a signed, expiring browser link to a port of a sandbox (anyone with the link
may open it until it expires); --open opens it in your browser.`
	cmd.Example = `  sandgate preview 3f6c… 3000
  sandgate preview 3f6c… 8888 --ttl 8h --open`
	cmd.Args = cobra.ExactArgs(2)
	cmd.ValidArgsFunction = g.completeSandboxIDs
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the link stays valid")
	cmd.Flags().BoolVar(&open, "open", false, "open the link in a browser")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var port int
		if _, err := fmt.Sscanf(args[1], "%d", &port); err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("preview: port %q: want 1–65535", args[1])
		}
		return g.call(func(ctx context.Context, c *sandgate.Client) error {
			ep, err := c.PreviewLink(ctx, args[0], port, ttl)
			if err != nil {
				return err
			}
			if err := g.print(cmd.OutOrStdout(), ep, func(w *tabwriter.Writer) { fmt.Fprintln(w, ep.URL) }); err != nil {
				return err
			}
			if open {
				return openBrowser(ep.URL)
			}
			return nil
		})
	}
}

func openBrowser(u string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	if err := exec.Command(name, u).Start(); err != nil {
		return fmt.Errorf("preview --open: %w", err)
	}
	return nil
}
