package cli

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	sandgate "github.com/sandgate/sandgate/client"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/mcpserver"
)

func setupMCP(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var image string
	cmd.Long = `Serves sandgate's MCP tools (create_sandbox, run_command, run_code, read_file,
write_file, list_files, preview_url, kill_sandbox, list_sandboxes) over standard input
and output, for a coding agent that starts it as a local MCP server. It acts with the
login of ` + "`sandgate login`" + ` (or SANDGATE_URL / SANDGATE_API_KEY), so the gateway
authenticates, decides by policy and audits every call as its own.

A remote agent can use the gateway's /mcp endpoint (streamable HTTP) instead.`
	cmd.Example = `  # in an agent's MCP configuration:
  {"mcpServers": {"sandgate": {"command": "sandgate", "args": ["mcp"]}}}`
	cmd.Args = cobra.NoArgs
	cmd.Flags().StringVar(&image, "image", "", "image create_sandbox uses when the model names none (default sandgate/base)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return g.call(func(ctx context.Context, c *sandgate.Client) error {
			return mcpserver.New(c, mcpserver.Options{Version: gateway.Version, DefaultImage: image}).Run(ctx, &mcp.StdioTransport{})
		})
	}
}
