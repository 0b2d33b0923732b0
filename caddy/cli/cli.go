// Package cli is sandgate's command line client: the subcommands (login, sandbox, exec,
// shell, cp, pool, batch, …) that drive a gateway through the Go SDK. caddy/ registers
// them beside Caddy's own commands; `sandgate run` stays Caddy's.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"sigs.k8s.io/yaml"

	sandgate "github.com/sandgate/sandgate/client"
)

// Command is one top-level subcommand, in the shape caddy/ registers.
type Command struct {
	Name, Usage, Short, Long string
	// Setup fills the cobra command caddy/ created for Name.
	Setup func(*cobra.Command)
}

// Commands lists the client's top-level subcommands.
func Commands() []Command {
	return []Command{
		{Name: "login", Usage: "--url <gateway> [--api-key <key>]", Short: "Stores the gateway URL and API key the other commands use", Setup: setupLogin},
		{Name: "sandbox", Usage: "create|ls|get|rm|renew|pause|resume", Short: "Manages sandboxes", Setup: setupSandbox},
		{Name: "exec", Usage: "[-i] <sandbox> -- <command> [args…]", Short: "Runs a command in a sandbox and exits with its code", Setup: setupExec},
		{Name: "shell", Usage: "<sandbox>", Short: "Opens an interactive shell in a sandbox", Setup: setupShell},
		{Name: "cp", Usage: "[-r] <src> <dest>", Short: "Copies files between this machine and a sandbox", Setup: setupCopy},
		{Name: "logs", Usage: "<sandbox> <command-id> [--follow]", Short: "Prints the output of a background command", Setup: setupLogs},
		{Name: "preview", Usage: "<sandbox> <port> [--ttl 1h] [--open]", Short: "Prints a signed browser link to a port of a sandbox", Setup: setupPreview},
		{Name: "pool", Usage: "ls|get|create|edit|rm", Short: "Manages pools of warm sandboxes", Setup: setupPool},
		{Name: "batch", Usage: "create|get|rm", Short: "Creates many sandboxes at once", Setup: setupBatch},
		{Name: "snapshot", Usage: "create|ls|get|rm", Short: "Manages snapshots of sandboxes", Setup: setupSnapshot},
		{Name: "fork", Usage: "<sandbox> --count N", Short: "Starts copies of a running sandbox", Setup: setupFork},
		{Name: "plugin", Usage: "push|ls|get|rm", Short: "Manages WASM plugins", Setup: setupPlugin},
		{Name: "tenant", Usage: "create|ls|get|edit", Short: "Manages tenants (platform admins)", Setup: setupTenant},
		{Name: "key", Usage: "create|ls|rm --tenant <id>", Short: "Manages a tenant's API keys (admins)", Setup: setupKey},
		{Name: "events", Usage: "[--follow] [--type t] [--sandbox id]", Short: "Prints the audit events of your tenant", Setup: setupEvents},
		{Name: "mcp", Usage: "", Short: "Serves sandgate's MCP tools over stdio for a local coding agent", Setup: setupMCP},
	}
}

// global holds the flags every client command takes.
type global struct {
	url, key, output string
}

// addGlobal adds --url, --api-key and -o to a top-level command and its children.
func addGlobal(cmd *cobra.Command) *global {
	g := &global{}
	cmd.PersistentFlags().StringVar(&g.url, "url", "", "gateway URL (default: $SANDGATE_URL, then the login)")
	cmd.PersistentFlags().StringVar(&g.key, "api-key", "", "API key (default: $SANDGATE_API_KEY, then the login)")
	cmd.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	// Usage after a server error would bury the error that matters.
	cmd.SilenceUsage = true
	return g
}

// client builds the SDK client from flags, environment and login, in that order.
func (g *global) client() (*sandgate.Client, error) {
	cfg, err := sandgate.LoadConfig()
	if err != nil {
		return nil, err
	}
	if g.url != "" {
		cfg.URL = g.url
	}
	if g.key != "" {
		cfg.Key = g.key
	}
	if cfg.URL == "" {
		return nil, errors.New("no gateway: run `sandgate login --url <gateway>` or set SANDGATE_URL")
	}
	return sandgate.New(cfg.URL, cfg.Key, sandgate.WithUserAgent("sandgate-cli"))
}

// signalContext ends on Ctrl-C or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// call runs one gateway call with the client the flags name, under a context that
// Ctrl-C or SIGTERM ends.
func (g *global) call(f func(context.Context, *sandgate.Client) error) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	return f(ctx, c)
}

// show runs a gateway call that answers one value and prints the value in the chosen
// format; table renders it for -o table. A command states its flags and its call, and
// show does the rest.
func show[T any](g *global, cmd *cobra.Command, get func(context.Context, *sandgate.Client) (T, error), table func(T) func(*tabwriter.Writer)) error {
	return g.call(func(ctx context.Context, c *sandgate.Client) error {
		v, err := get(ctx, c)
		if err != nil {
			return err
		}
		return g.print(cmd.OutOrStdout(), v, table(v))
	})
}

// one renders a single item with the table of a list of them.
func one[T any](table func([]T) func(*tabwriter.Writer)) func(*T) func(*tabwriter.Writer) {
	return func(v *T) func(*tabwriter.Writer) { return table([]T{*v}) }
}

// paged renders one page of a list with its table and, when there is more, how to get
// the next page (more names another way, such as ", or --all").
func paged[T any](items []T, p sandgate.Pagination, table func([]T) func(*tabwriter.Writer), more string) func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		table(items)(w)
		if p.HasNextPage {
			fmt.Fprintf(w, "(page %d of %d; --page %d for more%s)\n", p.Page, p.TotalPages, p.Page+1, more)
		}
	}
}

// withStatus renders a table and, below it, the reason and message of a status that has one.
func withStatus(table func(*tabwriter.Writer), reason, message string) func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		table(w)
		if message != "" {
			fmt.Fprintf(w, "\n%s: %s\n", reason, message)
		}
	}
}

// forEach runs a call for each id the command names and prints "<id> <done>" for each
// that succeeds. With one id its error is the command's; with several, a failure is
// printed and the others are still tried (things are "sandboxes", "snapshots": for the
// closing error).
func (g *global) forEach(cmd *cobra.Command, ids []string, done, things string, f func(ctx context.Context, c *sandgate.Client, id string) error) error {
	return g.call(func(ctx context.Context, c *sandgate.Client) error {
		var failed error
		for _, id := range ids {
			if err := f(ctx, c, id); err != nil {
				if len(ids) == 1 {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", id, err)
				failed = fmt.Errorf("%s failed for some %s", cmd.Name(), things)
				continue
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", id, done)
		}
		return failed
	})
}

// print writes v in the chosen format; table renders the table form.
func (g *global) print(w io.Writer, v any, table func(*tabwriter.Writer)) error {
	switch g.output {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case "yaml":
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(data)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		table(tw)
		return tw.Flush()
	}
	return fmt.Errorf("unknown output format %q: want table, json or yaml", g.output)
}

// row writes one tab-separated table row.
func row(w io.Writer, cols ...any) {
	s := make([]string, len(cols))
	for i, c := range cols {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

// when renders a time for a table: relative, "-" when unset.
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := time.Until(*t)
	suffix := ""
	if d < 0 {
		d, suffix = -d, " ago"
	} else {
		suffix = " from now"
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds%s", int(d.Seconds()), suffix)
	case d < time.Hour:
		return fmt.Sprintf("%dm%s", int(d.Minutes()), suffix)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%s", int(d.Hours()), suffix)
	}
	return t.Local().Format("2006-01-02 15:04")
}

// isTerminal reports whether f is a terminal (progress bars and raw mode only there).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// completeSandboxIDs completes the first argument with the caller's sandbox ids.
func (g *global) completeSandboxIDs(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := g.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	page, err := c.ListSandboxes(ctx, sandgate.ListOptions{PageSize: 200})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, sb := range page.Items {
		if strings.HasPrefix(sb.ID, prefix) {
			out = append(out, sb.ID+"\t"+sb.Status.State)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// progress draws a one-line progress bar on a terminal, and nothing elsewhere.
type progress struct {
	w       io.Writer
	tty     bool
	label   string
	total   int64
	done    int64
	lastAt  time.Time
	started time.Time
}

func newProgress(label string, total int64) *progress {
	return &progress{w: os.Stderr, tty: isTerminal(os.Stderr), label: label, total: total, started: time.Now()}
}

func (p *progress) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	if time.Since(p.lastAt) > 100*time.Millisecond {
		p.draw()
	}
	return len(b), nil
}

func (p *progress) draw() {
	p.lastAt = time.Now()
	if !p.tty {
		return
	}
	const width = 30
	frac := 0.0
	if p.total > 0 {
		frac = float64(p.done) / float64(p.total)
	}
	n := min(int(frac*width), width)
	fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f%% %s", p.label, strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, humanBytes(p.done))
}

func (p *progress) finish() {
	if p.tty {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
