package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandgate "github.com/sandgate/sandgate/client"
)

func poolTable(items []sandgate.Pool) func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "NAME", "IMAGE", "AVAILABLE", "ALLOCATED", "TOTAL", "BUFFER", "MAX")
		for _, p := range items {
			img := "-"
			if p.Template.Image != nil {
				img = p.Template.Image.URI
			}
			row(w, p.Name, img, p.Status.Available, p.Status.Allocated, p.Status.Total,
				fmt.Sprintf("%d–%d", p.CapacitySpec.BufferMin, p.CapacitySpec.BufferMax), p.CapacitySpec.PoolMax)
		}
	}
}

type capacityFlags struct{ bufferMin, bufferMax, poolMin, poolMax int }

func (f *capacityFlags) add(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.bufferMin, "buffer-min", 1, "ready sandboxes to keep at least")
	cmd.Flags().IntVar(&f.bufferMax, "buffer-max", 2, "ready sandboxes to keep at most")
	cmd.Flags().IntVar(&f.poolMin, "pool-min", 0, "sandboxes in all, at least")
	cmd.Flags().IntVar(&f.poolMax, "pool-max", 10, "sandboxes in all, at most")
}

func (f *capacityFlags) apply(cmd *cobra.Command, c *sandgate.Capacity) {
	for name, dst := range map[string]*int{"buffer-min": &c.BufferMin, "buffer-max": &c.BufferMax, "pool-min": &c.PoolMin, "pool-max": &c.PoolMax} {
		if cmd.Flags().Changed(name) || cmd.Name() == "create" {
			v, _ := cmd.Flags().GetInt(name)
			*dst = v
		}
	}
}

func setupPool(cmd *cobra.Command) {
	g := addGlobal(cmd)
	cmd.Long = "Pools keep warm sandboxes of one template; `sandbox create --pool` and `batch create --pool` claim them."
	cmd.Example = `  sandgate pool create warm --image sandgate/base:0.1.0 --buffer-min 2 --buffer-max 5 --pool-max 20
  sandgate pool ls
  sandgate pool edit warm --buffer-min 4
  sandgate pool rm warm`
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "Lists pools", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) ([]sandgate.Pool, error) { return c.ListPools(ctx) }, poolTable)
		}}
	get := &cobra.Command{Use: "get <name>", Short: "Prints one pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Pool, error) { return c.GetPool(ctx, args[0]) }, one(poolTable))
		}}
	var tf templateFlags
	var cf capacityFlags
	create := &cobra.Command{Use: "create <name>", Short: "Creates a pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tmpl, err := tf.request()
			if err != nil {
				return err
			}
			req := sandgate.PoolRequest{Name: args[0], Template: tmpl}
			cf.apply(cmd, &req.CapacitySpec)
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Pool, error) { return c.CreatePool(ctx, req) }, one(poolTable))
		}}
	tf.add(create, false)
	cf.add(create)
	var etf templateFlags
	var ecf capacityFlags
	edit := &cobra.Command{Use: "edit <name>", Short: "Changes a pool's capacity or template (only the flags given)", Args: cobra.ExactArgs(1),
		Example: `  sandgate pool edit warm --buffer-min 0 --buffer-max 0   # drain
  sandgate pool edit warm --image sandgate/base:0.2.0`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Pool, error) {
				p, err := c.GetPool(ctx, args[0])
				if err != nil {
					return nil, err
				}
				req := sandgate.PoolRequest{Name: p.Name, Template: p.Template, CapacitySpec: p.CapacitySpec}
				ecf.apply(cmd, &req.CapacitySpec)
				if etf.file != "" || etf.image != "" || len(etf.env) > 0 || len(etf.metadata) > 0 || etf.cpu != "" || etf.memory != "" || etf.timeout > 0 || len(etf.entrypoint) > 0 {
					if etf.image == "" && etf.file == "" && p.Template.Image != nil {
						etf.image = p.Template.Image.URI
					}
					t, err := etf.request()
					if err != nil {
						return nil, err
					}
					req.Template = t
				}
				return c.UpdatePool(ctx, req)
			}, one(poolTable))
		}}
	etf.add(edit, false)
	ecf.add(edit)
	rm := &cobra.Command{Use: "rm <name>…", Aliases: []string{"delete"}, Short: "Removes pools and their idle sandboxes", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *sandgate.Client) error {
				for _, name := range args {
					if err := c.DeletePool(ctx, name); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s removed\n", name)
				}
				return nil
			})
		}}
	cmd.AddCommand(ls, get, create, edit, rm)
}

func batchTable(b *sandgate.Batch) func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "ID", "SOURCE", "STATE", "MESSAGE")
		for _, m := range b.Members {
			msg := m.Status.Message
			if msg == "" {
				msg = "-"
			}
			row(w, m.ID, m.Source, m.Status.State, msg)
		}
		fmt.Fprintf(w, "\nbatch %s: %d running, %d pending, %d failed, %d gone of %d\n", b.ID, b.Summary.Running, b.Summary.Pending, b.Summary.Failed, b.Summary.Gone, b.Count)
	}
}

func setupBatch(cmd *cobra.Command) {
	g := addGlobal(cmd)
	cmd.Long = "A batch creates many sandboxes in one call, from a pool or cold from a template."
	cmd.Example = `  sandgate batch create --count 20
  sandgate batch create --count 100 --pool warm -l run=eval-7 -o json
  sandgate batch rm <batch-id>`
	var tf templateFlags
	var count int
	var noWait bool
	create := &cobra.Command{Use: "create --count N", Short: "Creates N sandboxes and shows their progress until all run", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 {
				return errors.New("batch create: --count must be at least 1")
			}
			req := sandgate.BatchRequest{Count: count, PoolRef: tf.pool}
			if tf.pool == "" {
				t, err := tf.request()
				if err != nil {
					return err
				}
				req.Template = &t
			} else {
				t, err := tf.request()
				if err != nil {
					return err
				}
				req.Env, req.Metadata, req.Timeout = t.Env, t.Metadata, t.Timeout
			}
			return g.call(func(ctx context.Context, c *sandgate.Client) error {
				b, err := c.CreateBatch(ctx, req)
				if err != nil {
					return err
				}
				return g.awaitBatch(ctx, cmd, c, b, noWait, "batch", "sandboxes")
			})
		}}
	tf.add(create, true)
	create.Flags().IntVarP(&count, "count", "n", 1, "number of sandboxes")
	create.Flags().BoolVar(&noWait, "no-wait", false, "print the batch at once, without waiting")
	get := &cobra.Command{Use: "get <batch-id>", Short: "Prints a batch and its members", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Batch, error) {
				return c.GetBatch(ctx, args[0])
			}, batchTable)
		}}
	rm := &cobra.Command{Use: "rm <batch-id>", Aliases: []string{"delete"}, Short: "Removes a batch and its sandboxes", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.forEach(cmd, args, "removed", "batches", func(ctx context.Context, c *sandgate.Client, id string) error { return c.DeleteBatch(ctx, id) })
		}}
	cmd.AddCommand(create, get, rm)
}

// awaitBatch shows a new batch's progress on stderr until every member has settled
// (unless noWait), prints the batch, and fails when any member failed. what names the
// command in the error ("batch", "fork"), members its members ("sandboxes", "copies").
func (g *global) awaitBatch(ctx context.Context, cmd *cobra.Command, c *sandgate.Client, b *sandgate.Batch, noWait bool, what, members string) error {
	if !noWait {
		tty := isTerminal(os.Stderr)
		last := ""
		started := time.Now()
		var err error
		b, err = c.WaitBatch(ctx, b.ID, func(b *sandgate.Batch) {
			line := batchProgress(b)
			if tty {
				fmt.Fprintf(cmd.ErrOrStderr(), "\r%s (%s)", line, time.Since(started).Round(time.Second))
			} else if line != last {
				// Not a terminal: one line per change, not per look.
				fmt.Fprintln(cmd.ErrOrStderr(), line)
			}
			last = line
		})
		if tty {
			fmt.Fprintln(cmd.ErrOrStderr())
		}
		if err != nil {
			return err
		}
	}
	if err := g.print(cmd.OutOrStdout(), b, batchTable(b)); err != nil {
		return err
	}
	if b.Summary.Failed > 0 {
		return fmt.Errorf("%s %s: %d of %d %s failed", what, b.ID, b.Summary.Failed, b.Count, members)
	}
	return nil
}

// batchProgress is one line of `batch create`'s live progress.
func batchProgress(b *sandgate.Batch) string {
	const width = 30
	done := b.Summary.Running + b.Summary.Failed + b.Summary.Gone
	n := 0
	if b.Count > 0 {
		n = min(done*width/b.Count, width)
	}
	return fmt.Sprintf("[%s%s] %d/%d running, %d pending, %d failed", strings.Repeat("=", n), strings.Repeat(" ", width-n),
		b.Summary.Running, b.Count, b.Summary.Pending, b.Summary.Failed)
}

func setupPlugin(cmd *cobra.Command) {
	g := addGlobal(cmd)
	cmd.Long = "Plugins are WebAssembly modules (wasip1) that see audit events and decide TTL extensions."
	cmd.Example = `  sandgate plugin push ttl ./ttl.wasm --hook decide_ttl --settings '{"extend":"30m"}'
  sandgate plugin ls
  sandgate plugin rm ttl`
	var hooks []string
	var settings string
	push := &cobra.Command{Use: "push <name> <module.wasm>", Short: "Installs or replaces a plugin", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			module, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			cfg := sandgate.PluginConfig{Hooks: hooks}
			if settings != "" {
				if err := json.Unmarshal([]byte(settings), &cfg.Settings); err != nil {
					return fmt.Errorf("--settings: %w", err)
				}
			}
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Plugin, error) {
				return c.PushPlugin(ctx, args[0], module, cfg)
			}, one(pluginTable))
		}}
	push.Flags().StringSliceVar(&hooks, "hook", []string{"on_event"}, "hooks the plugin implements: on_event, decide_ttl")
	push.Flags().StringVar(&settings, "settings", "", "settings as a JSON object")
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "Lists plugins", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) ([]sandgate.Plugin, error) { return c.ListPlugins(ctx) }, pluginTable)
		}}
	get := &cobra.Command{Use: "get <name>", Short: "Prints a plugin and its statistics", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Plugin, error) {
				return c.GetPlugin(ctx, args[0])
			}, one(pluginTable))
		}}
	rm := &cobra.Command{Use: "rm <name>", Aliases: []string{"delete"}, Short: "Uninstalls a plugin", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.forEach(cmd, args, "removed", "plugins", func(ctx context.Context, c *sandgate.Client, name string) error { return c.DeletePlugin(ctx, name) })
		}}
	cmd.AddCommand(push, ls, get, rm)
}

func pluginTable(items []sandgate.Plugin) func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "NAME", "VERSION", "HOOKS", "LOADED", "HASH")
		for _, p := range items {
			h := p.Hash
			if len(h) > 12 {
				h = h[:12]
			}
			row(w, p.Name, p.Version, strings.Join(p.Hooks, ","), p.Loaded, h)
		}
	}
}

func setupTenant(cmd *cobra.Command) {
	g := addGlobal(cmd)
	cmd.Long = "Tenants are isolated customers with their own keys, sandboxes and quotas. Platform admins only."
	cmd.Example = `  sandgate tenant create acme --max-concurrent 50
  sandgate tenant ls
  sandgate tenant edit <id> --max-concurrent 100`
	table := func(items []sandgate.Tenant) func(*tabwriter.Writer) {
		return func(w *tabwriter.Writer) {
			row(w, "ID", "NAME", "MAX CONCURRENT", "CREATED")
			for _, t := range items {
				created := t.CreatedAt
				row(w, t.ID, t.Name, t.Quotas.MaxConcurrent, when(&created))
			}
		}
	}
	var maxConcurrent int
	var quotasJSON string
	quotas := func(cmd *cobra.Command) (*sandgate.Quotas, error) {
		if quotasJSON == "" && !cmd.Flags().Changed("max-concurrent") {
			return nil, nil
		}
		q := &sandgate.Quotas{}
		if quotasJSON != "" {
			if err := json.Unmarshal([]byte(quotasJSON), q); err != nil {
				return nil, fmt.Errorf("--quotas: %w", err)
			}
		}
		if cmd.Flags().Changed("max-concurrent") {
			q.MaxConcurrent = maxConcurrent
		}
		return q, nil
	}
	create := &cobra.Command{Use: "create <name>", Short: "Creates a tenant", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := quotas(cmd)
			if err != nil {
				return err
			}
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Tenant, error) {
				return c.CreateTenant(ctx, sandgate.TenantRequest{Name: args[0], Quotas: q})
			}, one(table))
		}}
	edit := &cobra.Command{Use: "edit <id>", Short: "Changes a tenant's quotas", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := quotas(cmd)
			if err != nil {
				return err
			}
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Tenant, error) {
				return c.UpdateTenant(ctx, args[0], sandgate.TenantRequest{Quotas: q})
			}, one(table))
		}}
	for _, c := range []*cobra.Command{create, edit} {
		c.Flags().IntVar(&maxConcurrent, "max-concurrent", 0, "running sandboxes at most")
		c.Flags().StringVar(&quotasJSON, "quotas", "", `quotas as JSON, e.g. '{"maxCpuMillis":8000}'`)
	}
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "Lists tenants", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) ([]sandgate.Tenant, error) { return c.ListTenants(ctx) }, table)
		}}
	get := &cobra.Command{Use: "get <id>", Short: "Prints a tenant", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Tenant, error) {
				return c.GetTenant(ctx, args[0])
			}, one(table))
		}}
	cmd.AddCommand(create, ls, get, edit)
}

func setupKey(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var tenant string
	cmd.PersistentFlags().StringVar(&tenant, "tenant", "", "tenant id (default: your own)")
	cmd.Long = "API keys of a tenant. A new key's secret is printed once."
	cmd.Example = `  sandgate key create --tenant <id> --role member
  sandgate key ls --tenant <id>
  sandgate key rm --tenant <id> <key-id>`
	resolve := func(ctx context.Context, c *sandgate.Client) (string, error) {
		if tenant != "" {
			return tenant, nil
		}
		w, err := c.Whoami(ctx)
		if err != nil {
			return "", err
		}
		return w.Tenant, nil
	}
	table := func(items []sandgate.Key) func(*tabwriter.Writer) {
		return func(w *tabwriter.Writer) {
			row(w, "ID", "ROLE", "TENANT", "PREFIX", "CREATED")
			for _, k := range items {
				created := k.CreatedAt
				row(w, k.ID, k.Role, k.Tenant, k.Prefix, when(&created))
			}
		}
	}
	var role string
	create := &cobra.Command{Use: "create", Short: "Issues a key and prints its secret once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Key, error) {
				t, err := resolve(ctx, c)
				if err != nil {
					return nil, err
				}
				return c.CreateKey(ctx, t, role)
			}, func(k *sandgate.Key) func(*tabwriter.Writer) {
				return func(w *tabwriter.Writer) {
					table([]sandgate.Key{*k})(w)
					fmt.Fprintf(w, "\nkey (shown once): %s\n", k.Key)
				}
			})
		}}
	create.Flags().StringVar(&role, "role", sandgate.RoleMember, "admin, tenant-admin, member or viewer")
	_ = create.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"admin", "tenant-admin", "member", "viewer"}, cobra.ShellCompDirectiveNoFileComp))
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "Lists keys (without secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) ([]sandgate.Key, error) {
				t, err := resolve(ctx, c)
				if err != nil {
					return nil, err
				}
				return c.ListKeys(ctx, t)
			}, table)
		}}
	rm := &cobra.Command{Use: "rm <key-id>", Aliases: []string{"revoke"}, Short: "Revokes a key", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.forEach(cmd, args, "revoked", "keys", func(ctx context.Context, c *sandgate.Client, id string) error {
				t, err := resolve(ctx, c)
				if err != nil {
					return err
				}
				return c.RevokeKey(ctx, t, id)
			})
		}}
	cmd.AddCommand(create, ls, rm)
}

func setupEvents(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var follow, newest bool
	var types, exclude []string
	var sandbox, tenant, cursor string
	var limit int
	cmd.Long = "Prints your tenant's audit events (sandbox lifecycle, commands, file writes, previews, policy decisions)."
	cmd.Example = `  sandgate events --newest --limit 20
  sandgate events --follow --type sandbox.created,sandbox.deleted
  sandgate events --sandbox 3f6c… -o json
  sandgate events --follow --after 1764606093123-0   # resume after the last id seen`
	cmd.Args = cobra.NoArgs
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().BoolVar(&newest, "newest", false, "newest first")
	cmd.Flags().StringSliceVar(&types, "type", nil, "only these event types")
	cmd.Flags().StringSliceVar(&exclude, "exclude", nil, "not these event types")
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "only this sandbox's events")
	cmd.Flags().StringVar(&tenant, "tenant", "", "another tenant's events (admins)")
	cmd.Flags().IntVar(&limit, "limit", 100, "events per page")
	cmd.Flags().StringVar(&cursor, "after", "", "start after this event id (with --follow: resume a stream without a gap)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		q := sandgate.EventQuery{Tenant: tenant, Sandbox: sandbox, Types: types, Exclude: exclude, Limit: limit, Newest: newest, Cursor: cursor}
		return g.call(func(ctx context.Context, c *sandgate.Client) error {
			out := cmd.OutOrStdout()
			line := func(ev sandgate.Event) {
				switch g.output {
				case "json", "yaml":
					data, _ := json.Marshal(ev)
					fmt.Fprintf(out, "%s\n", data)
				default:
					data, _ := json.Marshal(ev.Data)
					sb := ev.SandboxID
					if sb == "" {
						sb = "-"
					}
					fmt.Fprintf(out, "%s  %-24s %s  %s\n", ev.Time.Local().Format(time.RFC3339), ev.Type, sb, data)
				}
			}
			if !follow {
				page, err := c.ListEvents(ctx, q)
				if err != nil {
					return err
				}
				if g.output == "yaml" || g.output == "json" {
					return g.print(out, page, nil)
				}
				for _, ev := range page.Items {
					line(ev)
				}
				return nil
			}
			for ev, err := range c.FollowEvents(ctx, q) {
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				line(ev)
			}
			return nil
		})
	}
}

// PolicyRemoteCommands are the `policy` subcommands that talk to a gateway (get, push),
// beside the local test and eval that caddy/modules registers.
func PolicyRemoteCommands() []*cobra.Command {
	g := &global{}
	addFlags := func(c *cobra.Command) {
		c.Flags().StringVar(&g.url, "url", "", "gateway URL (default: $SANDGATE_URL, then the login)")
		c.Flags().StringVar(&g.key, "api-key", "", "API key (default: $SANDGATE_API_KEY, then the login)")
		c.SilenceUsage = true
	}
	var source bool
	get := &cobra.Command{Use: "get [<module>]", Short: "Prints the policy in force on the gateway (a module's source with its name)", Args: cobra.MaximumNArgs(1),
		Example: `  sandgate policy get
  sandgate policy get access.rego > access.rego
  sandgate policy get -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var p *sandgate.Policy
			err := g.call(func(ctx context.Context, c *sandgate.Client) (err error) {
				p, err = c.GetPolicy(ctx)
				return err
			})
			if err != nil {
				return err
			}
			if len(args) == 1 {
				for _, m := range p.Modules {
					if m.Name == args[0] {
						_, err := fmt.Fprint(cmd.OutOrStdout(), m.Source)
						return err
					}
				}
				return fmt.Errorf("policy get: no module %q in force", args[0])
			}
			return g.print(cmd.OutOrStdout(), p, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "version %s\n\n", p.Version)
				row(w, "MODULE", "PACKAGE", "ORIGIN")
				for _, m := range p.Modules {
					row(w, m.Name, m.Package, m.Origin)
					if source {
						fmt.Fprintln(w, m.Source)
					}
				}
			})
		}}
	addFlags(get)
	get.Flags().StringVarP(&g.output, "output", "o", "table", "output format: table, json or yaml")
	get.Flags().BoolVar(&source, "source", false, "print every module's source")
	push := &cobra.Command{Use: "push <file.rego|dir>…", Short: "Replaces policy modules on every gateway (named by file name)", Args: cobra.MinimumNArgs(1),
		Long: `Uploads Rego modules; each replaces the module of the same file name in force (or adds
one). The gateway compiles and tests them first and refuses a policy that does not compile.`,
		Example: `  sandgate policy push ./policy/access.rego
  sandgate policy push ./policy/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			modules := map[string]string{}
			for _, a := range args {
				st, err := os.Stat(a)
				if err != nil {
					return err
				}
				files := []string{a}
				if st.IsDir() {
					files, _ = filepath.Glob(filepath.Join(a, "*.rego"))
				}
				for _, f := range files {
					data, err := os.ReadFile(f)
					if err != nil {
						return err
					}
					modules[filepath.Base(f)] = string(data)
				}
			}
			if len(modules) == 0 {
				return errors.New("policy push: no .rego files")
			}
			return g.call(func(ctx context.Context, c *sandgate.Client) error {
				p, err := c.PushPolicy(ctx, modules)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "policy version %s in force (%d modules pushed)\n", p.Version, len(modules))
				return nil
			})
		}}
	addFlags(push)
	return []*cobra.Command{get, push}
}
