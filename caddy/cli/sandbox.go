package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandgate "github.com/sandgate/sandgate/client"
)

// defaultImage is the image `sandbox create` uses without --image.
const defaultImage = "sandgate/base:0.1.0"

// templateFlags are the flags that describe a sandbox to create (sandbox create, pool
// create, batch create).
type templateFlags struct {
	file, image, cpu, memory, pool string
	snapshot                       string
	volumes                        []string
	timeout                        time.Duration
	env, metadata                  []string
	entrypoint                     []string
}

func (f *templateFlags) add(cmd *cobra.Command, withPool bool) {
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "a CreateSandboxRequest as JSON (flags override its fields)")
	cmd.Flags().StringVar(&f.image, "image", "", "image (default "+defaultImage+")")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 0, "time to live, e.g. 30m (0: the gateway's default)")
	cmd.Flags().StringArrayVarP(&f.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	cmd.Flags().StringArrayVarP(&f.metadata, "metadata", "l", nil, "metadata label KEY=VALUE (repeatable)")
	cmd.Flags().StringVar(&f.cpu, "cpu", "", `CPU limit, e.g. "500m" or "2"`)
	cmd.Flags().StringVar(&f.memory, "memory", "", `memory limit, e.g. "512Mi"`)
	cmd.Flags().StringSliceVar(&f.entrypoint, "entrypoint", nil, "entrypoint, comma-separated (default tail -f /dev/null)")
	cmd.Flags().StringVar(&f.snapshot, "snapshot", "", "start from this snapshot (its image and entrypoint)")
	cmd.Flags().StringArrayVarP(&f.volumes, "volume", "v", nil, "mount SOURCE:/path[:ro]: a named volume of your tenant, or a /host/path (repeatable)")
	if withPool {
		cmd.Flags().StringVar(&f.pool, "pool", "", "claim a warm sandbox from this pool")
	}
}

func keyValues(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// request builds the CreateRequest the flags describe.
func (f *templateFlags) request() (sandgate.CreateRequest, error) {
	var req sandgate.CreateRequest
	if f.file != "" {
		data, err := os.ReadFile(f.file)
		if err != nil {
			return req, err
		}
		if err := json.Unmarshal(data, &req); err != nil {
			return req, fmt.Errorf("%s: %w", f.file, err)
		}
	}
	if f.image != "" {
		req.Image = &sandgate.Image{URI: f.image}
	}
	if f.snapshot != "" {
		req.SnapshotID = f.snapshot
	}
	for i, s := range f.volumes {
		v, err := parseVolume(i, s)
		if err != nil {
			return req, err
		}
		req.Volumes = append(req.Volumes, v)
	}
	if f.pool != "" {
		if req.Extensions == nil {
			req.Extensions = map[string]string{}
		}
		req.Extensions["poolRef"] = f.pool
	} else if req.Image == nil && req.SnapshotID == "" {
		req.Image = &sandgate.Image{URI: defaultImage}
	}
	if len(f.entrypoint) > 0 {
		req.Entrypoint = f.entrypoint
	} else if req.Entrypoint == nil && req.Image != nil {
		req.Entrypoint = []string{"tail", "-f", "/dev/null"}
	}
	if f.timeout > 0 {
		req.Timeout = sandgate.Seconds(f.timeout)
	}
	env, err := keyValues("env", f.env)
	if err != nil {
		return req, err
	}
	for k, v := range env {
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	md, err := keyValues("metadata", f.metadata)
	if err != nil {
		return req, err
	}
	for k, v := range md {
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		req.Metadata[k] = v
	}
	for k, v := range map[string]string{"cpu": f.cpu, "memory": f.memory} {
		if v != "" {
			if req.ResourceLimits == nil {
				req.ResourceLimits = map[string]string{}
			}
			req.ResourceLimits[k] = v
		}
	}
	return req, nil
}

func sandboxTable(items []sandgate.Sandbox) func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "ID", "STATE", "IMAGE", "CREATED", "EXPIRES", "METADATA")
		for _, sb := range items {
			img := "-"
			if sb.Image != nil {
				img = sb.Image.URI
			}
			var md []string
			for k, v := range sb.Metadata {
				md = append(md, k+"="+v)
			}
			created := sb.CreatedAt
			row(w, sb.ID, sb.Status.State, img, when(&created), when(sb.ExpiresAt), strings.Join(md, ","))
		}
	}
}

// renewal is what `sandbox renew` prints (fields in the order of its JSON keys).
type renewal struct {
	ExpiresAt time.Time `json:"expiresAt"`
	ID        string    `json:"id"`
}

func (r renewal) table() func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "ID", "EXPIRES")
		row(w, r.ID, r.ExpiresAt.Local().Format(time.RFC3339))
	}
}

func setupSandbox(cmd *cobra.Command) {
	g := addGlobal(cmd)
	cmd.Long = "Creates, lists, inspects, renews, pauses, resumes and removes sandboxes."
	cmd.Example = `  sandgate sandbox create --image sandgate/base:0.1.0 --timeout 30m -l team=ml
  sandgate sandbox ls --state Running -o json
  sandgate sandbox renew <id> --for 1h
  sandgate sandbox rm <id> <id2>`

	var tf templateFlags
	create := &cobra.Command{
		Use:   "create",
		Short: "Creates a sandbox and prints it once it runs",
		Example: `  sandgate sandbox create
  sandgate sandbox create --image python:3.12 --entrypoint sleep,infinity --cpu 1 --memory 1Gi
  sandgate sandbox create --pool warm -e TOKEN=abc -o json
  sandgate sandbox create --snapshot <snapshot-id>
  sandgate sandbox create --volume data:/data --volume /srv/shared:/mnt/shared:ro`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := tf.request()
			if err != nil {
				return err
			}
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Sandbox, error) {
				sb, err := c.CreateSandbox(ctx, req)
				if err == nil && sb.Image == nil {
					sb.Image = req.Image // the create answer does not repeat it
				}
				return sb, err
			}, one(sandboxTable))
		},
	}
	tf.add(create, true)

	var states, metadata []string
	var all bool
	var page, pageSize int
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "Lists your sandboxes, newest first",
		Example: `  sandgate sandbox ls
  sandgate sandbox ls --state Running --state Paused -l team=ml
  sandgate sandbox ls --all -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			md, err := keyValues("metadata", metadata)
			if err != nil {
				return err
			}
			opts := sandgate.ListOptions{States: states, Metadata: md, Page: page, PageSize: pageSize}
			if all {
				return show(g, cmd, func(ctx context.Context, c *sandgate.Client) ([]sandgate.Sandbox, error) {
					return c.ListAllSandboxes(ctx, opts)
				}, sandboxTable)
			}
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.SandboxPage, error) {
				return c.ListSandboxes(ctx, opts)
			},
				func(p *sandgate.SandboxPage) func(*tabwriter.Writer) {
					return paged(p.Items, p.Pagination, sandboxTable, ", or --all")
				})
		},
	}
	ls.Flags().StringArrayVar(&states, "state", nil, "only sandboxes in this state (repeatable)")
	ls.Flags().StringArrayVarP(&metadata, "metadata", "l", nil, "only sandboxes with this label KEY=VALUE (repeatable)")
	ls.Flags().BoolVar(&all, "all", false, "every page")
	ls.Flags().IntVar(&page, "page", 0, "page number")
	ls.Flags().IntVar(&pageSize, "page-size", 0, "items per page (1–200)")

	get := &cobra.Command{
		Use:               "get <id>",
		Short:             "Prints one sandbox",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeSandboxIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Sandbox, error) {
				return c.GetSandbox(ctx, args[0])
			},
				func(sb *sandgate.Sandbox) func(*tabwriter.Writer) {
					return withStatus(one(sandboxTable)(sb), sb.Status.Reason, sb.Status.Message)
				})
		},
	}

	each := func(use, short, done string, f func(ctx context.Context, c *sandgate.Client, id string) error) *cobra.Command {
		return &cobra.Command{
			Use:               use + " <id>…",
			Short:             short,
			Args:              cobra.MinimumNArgs(1),
			ValidArgsFunction: g.completeSandboxIDs,
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.forEach(cmd, args, done, "sandboxes", f)
			},
		}
	}
	rm := each("rm", "Removes sandboxes", "removed", func(ctx context.Context, c *sandgate.Client, id string) error {
		return c.DeleteSandbox(ctx, id)
	})
	rm.Aliases = []string{"delete", "kill"}
	pause := each("pause", "Freezes running sandboxes", "pausing", func(ctx context.Context, c *sandgate.Client, id string) error {
		return c.PauseSandbox(ctx, id)
	})
	resume := each("resume", "Thaws paused sandboxes", "resuming", func(ctx context.Context, c *sandgate.Client, id string) error {
		return c.ResumeSandbox(ctx, id)
	})

	var renewFor time.Duration
	renew := &cobra.Command{
		Use:               "renew <id> --for <duration>",
		Short:             "Moves a sandbox's expiry to now + duration",
		Example:           `  sandgate sandbox renew 3f6c… --for 2h`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeSandboxIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (renewal, error) {
				exp, err := c.RenewSandbox(ctx, args[0], time.Now().Add(renewFor))
				return renewal{ID: args[0], ExpiresAt: exp}, err
			}, renewal.table)
		},
	}
	renew.Flags().DurationVar(&renewFor, "for", time.Hour, "new time to live from now")

	cmd.AddCommand(create, ls, get, rm, renew, pause, resume)
}
