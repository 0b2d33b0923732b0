package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandgate "github.com/sandgate/sandgate/client"
)

// parseVolume reads a --volume flag: SOURCE:MOUNT[:ro]. A SOURCE starting with / is a
// host directory; any other is the claim name of a named volume of your tenant.
func parseVolume(i int, s string) (sandgate.Volume, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") ||
		(len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw") {
		return sandgate.Volume{}, fmt.Errorf("--volume %q: want SOURCE:/mount/path[:ro] (SOURCE a claim name or a /host/path)", s)
	}
	v := sandgate.Volume{MountPath: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"}
	if strings.HasPrefix(parts[0], "/") {
		v.Name = fmt.Sprintf("host-%d", i)
		v.Host = &sandgate.HostVolume{Path: parts[0]}
	} else {
		v.Name = parts[0]
		v.PVC = &sandgate.PVCVolume{ClaimName: parts[0]}
	}
	return v, nil
}

func snapshotTable(items []sandgate.Snapshot) func(*tabwriter.Writer) {
	return func(w *tabwriter.Writer) {
		row(w, "ID", "STATE", "SANDBOX", "NAME", "CREATED")
		for _, s := range items {
			name := s.Name
			if name == "" {
				name = "-"
			}
			created := s.CreatedAt
			row(w, s.ID, s.Status.State, s.SandboxID, name, when(&created))
		}
	}
}

func setupSnapshot(cmd *cobra.Command) {
	g := addGlobal(cmd)
	cmd.Long = "A snapshot keeps a sandbox's filesystem; new sandboxes start from it with `sandbox create --snapshot`."
	cmd.Example = `  sandgate snapshot create <sandbox-id> --name before-upgrade
  sandgate snapshot ls --sandbox <sandbox-id> --state Ready -o json
  sandgate sandbox create --snapshot <snapshot-id>
  sandgate snapshot rm <snapshot-id>`

	var name string
	var noWait bool
	create := &cobra.Command{
		Use:   "create <sandbox-id>",
		Short: "Snapshots a running sandbox and prints the snapshot once it is Ready",
		Example: `  sandgate snapshot create 3f6c… --name base
  sandgate snapshot create 3f6c… --no-wait -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeSandboxIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Snapshot, error) {
				s, err := c.CreateSnapshot(ctx, args[0], name)
				if err != nil || noWait {
					return s, err
				}
				return c.WaitSnapshot(ctx, s.ID)
			}, one(snapshotTable))
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name for the snapshot")
	create.Flags().BoolVar(&noWait, "no-wait", false, "print the snapshot at once (Creating), without waiting")

	var sandboxID string
	var states []string
	var page, pageSize int
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "Lists your snapshots",
		Example: `  sandgate snapshot ls
  sandgate snapshot ls --sandbox 3f6c… --state Ready -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.SnapshotPage, error) {
				return c.ListSnapshots(ctx, sandgate.SnapshotListOptions{SandboxID: sandboxID, States: states, Page: page, PageSize: pageSize})
			}, func(p *sandgate.SnapshotPage) func(*tabwriter.Writer) {
				return paged(p.Items, p.Pagination, snapshotTable, "")
			})
		},
	}
	ls.Flags().StringVar(&sandboxID, "sandbox", "", "only snapshots of this sandbox")
	ls.Flags().StringArrayVar(&states, "state", nil, "only snapshots in this state: Creating, Ready, Failed (repeatable)")
	ls.Flags().IntVar(&page, "page", 0, "page number")
	ls.Flags().IntVar(&pageSize, "page-size", 0, "items per page (1–200)")

	get := &cobra.Command{
		Use:   "get <snapshot-id>",
		Short: "Prints one snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(g, cmd, func(ctx context.Context, c *sandgate.Client) (*sandgate.Snapshot, error) {
				return c.GetSnapshot(ctx, args[0])
			},
				func(s *sandgate.Snapshot) func(*tabwriter.Writer) {
					return withStatus(one(snapshotTable)(s), s.Status.Reason, s.Status.Message)
				})
		},
	}

	rm := &cobra.Command{
		Use:     "rm <snapshot-id>…",
		Aliases: []string{"delete"},
		Short:   "Removes snapshots (refused while a sandbox runs from one)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.forEach(cmd, args, "removed", "snapshots", func(ctx context.Context, c *sandgate.Client, id string) error { return c.DeleteSnapshot(ctx, id) })
		},
	}
	cmd.AddCommand(create, ls, get, rm)
}

func setupFork(cmd *cobra.Command) {
	g := addGlobal(cmd)
	cmd.Long = "Fork snapshots a running sandbox and starts copies of it (files, env, egress policy), " +
		"each with its own id and token; it shows their progress like `batch create`."
	cmd.Example = `  sandgate fork 3f6c… --count 4
  sandgate fork 3f6c… -n 2 --timeout 30m -l run=try-2 -o json`
	var count int
	var noWait bool
	var timeout time.Duration
	var metadata []string
	cmd.Args = cobra.ExactArgs(1)
	cmd.ValidArgsFunction = g.completeSandboxIDs
	cmd.Flags().IntVarP(&count, "count", "n", 1, "number of copies")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "print the batch at once, without waiting")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "time to live of each copy, e.g. 30m (0: the gateway's default)")
	cmd.Flags().StringArrayVarP(&metadata, "metadata", "l", nil, "metadata label KEY=VALUE of the copies (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if count < 1 {
			return errors.New("fork: --count must be at least 1")
		}
		md, err := keyValues("metadata", metadata)
		if err != nil {
			return err
		}
		req := sandgate.ForkRequest{Count: count, Metadata: md}
		if timeout > 0 {
			req.Timeout = sandgate.Seconds(timeout)
		}
		return g.call(func(ctx context.Context, c *sandgate.Client) error {
			b, err := c.Fork(ctx, args[0], req)
			if err != nil {
				return err
			}
			return g.awaitBatch(ctx, cmd, c, b, noWait, "fork", "copies")
		})
	}
}
