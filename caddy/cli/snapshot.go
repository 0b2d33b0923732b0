package cli

import (
	"errors"
	"fmt"
	"os"
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
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			s, err := c.CreateSnapshot(ctx, args[0], name)
			if err != nil {
				return err
			}
			if !noWait {
				if s, err = c.WaitSnapshot(ctx, s.ID); err != nil {
					return err
				}
			}
			return g.print(cmd.OutOrStdout(), s, snapshotTable([]sandgate.Snapshot{*s}))
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
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			p, err := c.ListSnapshots(ctx, sandgate.SnapshotListOptions{SandboxID: sandboxID, States: states, Page: page, PageSize: pageSize})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), p, func(w *tabwriter.Writer) {
				snapshotTable(p.Items)(w)
				if p.Pagination.HasNextPage {
					fmt.Fprintf(w, "(page %d of %d; --page %d for more)\n", p.Pagination.Page, p.Pagination.TotalPages, p.Pagination.Page+1)
				}
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
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			s, err := c.GetSnapshot(ctx, args[0])
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), s, func(w *tabwriter.Writer) {
				snapshotTable([]sandgate.Snapshot{*s})(w)
				if s.Status.Message != "" {
					fmt.Fprintf(w, "\n%s: %s\n", s.Status.Reason, s.Status.Message)
				}
			})
		},
	}

	rm := &cobra.Command{
		Use:     "rm <snapshot-id>…",
		Aliases: []string{"delete"},
		Short:   "Removes snapshots (refused while a sandbox runs from one)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			var failed error
			for _, id := range args {
				if err := c.DeleteSnapshot(ctx, id); err != nil {
					if len(args) == 1 {
						return err
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", id, err)
					failed = errors.New("rm failed for some snapshots")
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s removed\n", id)
			}
			return failed
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
		c, err := g.client()
		if err != nil {
			return err
		}
		ctx, cancel := signalContext()
		defer cancel()
		b, err := c.Fork(ctx, args[0], req)
		if err != nil {
			return err
		}
		if !noWait {
			tty := isTerminal(os.Stderr)
			last := ""
			started := time.Now()
			b, err = c.WaitBatch(ctx, b.ID, func(b *sandgate.Batch) {
				line := batchProgress(b)
				if tty {
					fmt.Fprintf(cmd.ErrOrStderr(), "\r%s (%s)", line, time.Since(started).Round(time.Second))
				} else if line != last {
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
			return fmt.Errorf("fork %s: %d of %d copies failed", b.ID, b.Summary.Failed, b.Count)
		}
		return nil
	}
}
