package cli

import (
	"github.com/spf13/cobra"
)

func setupMCP(cmd *cobra.Command) {
	g := addGlobal(cmd)
	_ = g
}
