package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	sandgate "github.com/sandgate/sandgate/client"
)

func setupLogin(cmd *cobra.Command) {
	g := addGlobal(cmd)
	var keyStdin bool
	cmd.Long = `Checks the gateway URL and API key against the gateway (GET /v1/whoami) and stores
them in $XDG_CONFIG_HOME/sandgate/config.json (mode 0600), where every other client
command and ` + "`sandgate mcp`" + ` read them. SANDGATE_URL and SANDGATE_API_KEY override
the stored values; --url and --api-key override both.

Without --api-key the key is read from standard input (without echo on a terminal).`
	cmd.Example = `  sandgate login --url http://127.0.0.1:8080
  echo "$KEY" | sandgate login --url https://sandboxes.example.com --api-key-stdin`
	cmd.Args = cobra.NoArgs
	cmd.Flags().BoolVar(&keyStdin, "api-key-stdin", false, "read the API key from standard input")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, _ := sandgate.LoadConfig()
		if g.url != "" {
			cfg.URL = g.url
		}
		if g.key != "" {
			cfg.Key = g.key
		} else if keyStdin || cfg.Key == "" {
			key, err := readKey(cmd)
			if err != nil {
				return err
			}
			cfg.Key = key
		}
		c, err := sandgate.New(cfg.URL, cfg.Key)
		if err != nil {
			return err
		}
		ctx, cancel := signalContext()
		defer cancel()
		who, err := c.Whoami(ctx)
		if err != nil {
			return fmt.Errorf("login: %w", err)
		}
		path, err := sandgate.SaveConfig(cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "Logged in to %s as tenant %s (%s); saved to %s\n", c.BaseURL(), who.Tenant, who.Role, path)
		return nil
	}
}

func readKey(cmd *cobra.Command) (string, error) {
	if f, ok := cmd.InOrStdin().(*os.File); ok && isTerminal(f) {
		fmt.Fprint(cmd.ErrOrStderr(), "API key: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("login: read key: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if strings.TrimSpace(line) == "" {
		return "", fmt.Errorf("login: no API key on standard input (%v)", err)
	}
	return strings.TrimSpace(line), nil
}
