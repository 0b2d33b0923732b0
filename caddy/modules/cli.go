package modules

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/caddy/cli"
)

// The client subcommands (login, sandbox, exec, …) live in caddy/cli; this registers
// them beside Caddy's own.
func init() {
	for _, c := range cli.Commands() {
		caddycmd.RegisterCommand(caddycmd.Command{
			Name: c.Name, Usage: c.Usage, Short: c.Short, Long: c.Long,
			CobraFunc: func(cmd *cobra.Command) { c.Setup(cmd) },
		})
	}
}
