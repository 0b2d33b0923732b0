package modules

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/caddy/cli"
	"github.com/sandgate/sandgate/policy"
)

// The policy subcommands let policy authors check their Rego the way the gateway will
// load it (defaults plus their directory, with the override rule applied) without
// starting a gateway: `sandgate policy test` in CI, `sandgate policy eval` to see why one
// request was allowed or denied.
func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "policy",
		Usage: "test [<dir>] | eval [--dir <dir>] --query <query> --input <file>|-",
		Short: "Tests or evaluates sandgate's Rego policy",
		Long: `
Works on the policy the gateway would load: the embedded default policy plus the
operator's directory (the value of SANDGATE_POLICY_DIR), where a file with the same
package and name as a default one replaces it.

  sandgate policy test [<dir>]
      Runs every Rego unit test (rules named test_*), the defaults' and the
      directory's _test.rego files, and prints a report like "opa test -v".
      Exits 1 when a test fails or the policy does not compile.

  sandgate policy eval [--dir <dir>] --query <query> --input <file>|- [--explain]
      Evaluates one query (e.g. data.sandgate.access.decision) against one JSON
      input read from a file or standard input, and prints the result set as JSON.
      --explain prints print() output and the evaluation trace to standard error.
      Exits 1 when the policy does not compile or the evaluation fails.
`,
		CobraFunc: func(cmd *cobra.Command) {
			// Usage after an evaluation failure would hide the error that matters.
			cmd.SilenceUsage = true
			cmd.AddCommand(policyTestCommand(), policyEvalCommand())
			cmd.AddCommand(cli.PolicyRemoteCommands()...)
		},
	})
}

func policyTestCommand() *cobra.Command {
	return &cobra.Command{
		Use:          "test [<dir>]",
		Short:        "Runs the Rego unit tests of the default policy and of an operator directory",
		Args:         cobra.MaximumNArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			passed, failed, err := policy.RunTests(ctx, dir, cmd.OutOrStdout())
			if err != nil {
				return fmt.Errorf("policy test: %w", err)
			}
			if failed > 0 {
				return fmt.Errorf("policy test: %d of %d tests failed", failed, passed+failed)
			}
			return nil
		},
	}
}

func policyEvalCommand() *cobra.Command {
	var dir, query, inputPath string
	var explain bool
	c := &cobra.Command{
		Use:          "eval --query <query> --input <file>|-",
		Short:        "Evaluates one query against one JSON input",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			input, err := readInput(inputPath, cmd.InOrStdin())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			result, explanation, err := policy.EvalOnce(ctx, dir, query, input)
			if explain && explanation != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), explanation)
			}
			if err != nil {
				return fmt.Errorf("policy eval: %w", err)
			}
			var out bytes.Buffer
			if json.Indent(&out, result, "", "  ") != nil {
				out.Reset()
				out.Write(result)
			}
			out.WriteByte('\n')
			_, err = cmd.OutOrStdout().Write(out.Bytes())
			return err
		},
	}
	c.Flags().StringVar(&dir, "dir", os.Getenv("SANDGATE_POLICY_DIR"), "operator policy directory (default: $SANDGATE_POLICY_DIR; empty: the default policy alone)")
	c.Flags().StringVarP(&query, "query", "q", "", "Rego query, e.g. data.sandgate.access.decision")
	c.Flags().StringVarP(&inputPath, "input", "i", "", "JSON input file, - for standard input; omitted: no input")
	c.Flags().BoolVar(&explain, "explain", false, "print print() output and the evaluation trace to standard error")
	_ = c.MarkFlagRequired("query")
	return c
}

// readInput reads the evaluation input and rejects what is not JSON here, where the
// message can name the file, rather than deep inside the evaluation.
func readInput(path string, stdin io.Reader) ([]byte, error) {
	var data []byte
	var err error
	switch path {
	case "":
		return nil, nil
	case "-":
		data, err = io.ReadAll(stdin)
	default:
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("policy eval: read input %s: %w", path, err)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("policy eval: input %s is not valid JSON", path)
	}
	return data, nil
}
