package sandgate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// Create a sandbox, run a command in it and remove it.
func Example() {
	ctx := context.Background()
	c, err := sandgate.NewFromEnv() // SANDGATE_URL, SANDGATE_API_KEY or `sandgate login`
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, sandgate.CreateRequest{
		Image:      &sandgate.Image{URI: "sandgate/base:0.1.0"},
		Entrypoint: []string{"tail", "-f", "/dev/null"},
		Timeout:    sandgate.Seconds(10 * time.Minute),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	a, err := c.Agent(ctx, sb.ID)
	if err != nil {
		log.Fatal(err)
	}
	res, err := a.Exec(ctx, "uname -s")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout, "exit ", res.ExitCode)
}

// Server errors match the package's sentinel errors by code.
func ExampleError() {
	c, _ := sandgate.New("http://127.0.0.1:8080", os.Getenv("SANDGATE_API_KEY"))
	_, err := c.GetSandbox(context.Background(), "no-such-sandbox")
	var apiErr *sandgate.Error
	switch {
	case errors.Is(err, sandgate.ErrNotFound):
		fmt.Println("gone")
	case errors.As(err, &apiErr):
		fmt.Println(apiErr.Code, apiErr.Message, "request", apiErr.RequestID)
	}
}

// Stream a command's output as it comes, line by line.
func ExampleAgent_Stream() {
	ctx := context.Background()
	c, _ := sandgate.NewFromEnv()
	a, _ := c.Agent(ctx, "3f6c…")
	for ev, err := range a.Stream(ctx, sandgate.Command{Command: "for i in 1 2 3; do echo $i; sleep 1; done"}) {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Type == "stdout" {
			fmt.Println("line:", ev.Text)
		}
	}
}

// Upload a file of any size and read it back.
func ExampleAgent_Upload() {
	ctx := context.Background()
	c, _ := sandgate.NewFromEnv()
	a, _ := c.Agent(ctx, "3f6c…")
	if err := a.Upload(ctx, "/workspace/main.py", strings.NewReader("print('hi')\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	data, _ := a.ReadFile(ctx, "/workspace/main.py")
	fmt.Printf("%s", data)
}

// Create ten sandboxes at once and follow them until all run.
func ExampleClient_WaitBatch() {
	ctx := context.Background()
	c, _ := sandgate.NewFromEnv()
	b, err := c.CreateBatch(ctx, sandgate.BatchRequest{Count: 10, Template: &sandgate.CreateRequest{
		Image: &sandgate.Image{URI: "sandgate/base:0.1.0"}, Entrypoint: []string{"tail", "-f", "/dev/null"},
	}})
	if err != nil {
		log.Fatal(err)
	}
	b, _ = c.WaitBatch(ctx, b.ID, func(b *sandgate.Batch) {
		fmt.Printf("\r%d/%d running", b.Summary.Running, b.Count)
	})
	fmt.Println()
	for _, m := range b.Members {
		fmt.Println(m.ID, m.Status.State)
	}
}

// Run an interactive terminal.
func ExampleAgent_OpenPTY() {
	ctx := context.Background()
	c, _ := sandgate.NewFromEnv()
	a, _ := c.Agent(ctx, "3f6c…")
	term, err := a.OpenPTY(ctx, sandgate.PTYRequest{Command: "/bin/bash", Cols: 120, Rows: 40})
	if err != nil {
		log.Fatal(err)
	}
	defer term.Close()
	go term.Write([]byte("ls /; exit\n"))
	buf := make([]byte, 4096)
	for {
		n, err := term.Read(buf)
		os.Stdout.Write(buf[:n])
		if err != nil {
			break
		}
	}
}

// Snapshot a sandbox, start a new one from the snapshot and fork the original twice.
func ExampleClient_Fork() {
	ctx := context.Background()
	c, _ := sandgate.NewFromEnv()
	snap, err := c.CreateSnapshot(ctx, "3f6c…", "after-setup")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.WaitSnapshot(ctx, snap.ID); err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: snap.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("from the snapshot:", sb.ID)

	b, err := c.Fork(ctx, "3f6c…", sandgate.ForkRequest{Count: 2})
	if err != nil {
		log.Fatal(err)
	}
	b, _ = c.WaitBatch(ctx, b.ID, nil)
	for _, m := range b.Members {
		fmt.Println("fork:", m.ID, m.Status.State)
	}
	// A snapshot goes once no sandbox runs from it.
	if err := c.DeleteSnapshot(ctx, snap.ID); errors.Is(err, sandgate.ErrSnapshotInUse) {
		fmt.Println("still in use")
	}
}

// Share a named volume between two sandboxes of your tenant.
func ExampleVolume() {
	ctx := context.Background()
	c, _ := sandgate.NewFromEnv()
	vols := []sandgate.Volume{{Name: "data", MountPath: "/data", PVC: &sandgate.PVCVolume{ClaimName: "shared"}}}
	for range 2 {
		sb, err := c.CreateSandbox(ctx, sandgate.CreateRequest{
			Image: &sandgate.Image{URI: "sandgate/base:0.1.0"}, Entrypoint: []string{"tail", "-f", "/dev/null"}, Volumes: vols,
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(sb.ID, "mounts shared at /data")
	}
}

// Follow a sandbox's CPU and memory as the gateway samples them.
func ExampleClient_WatchSandboxMetrics() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := sandgate.NewFromEnv()
	for p, err := range c.WatchSandboxMetrics(ctx, "3f6c…") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s cpu %.0f%% mem %d MiB\n", p.Time.Format(time.TimeOnly), p.CPUPercent, p.MemoryBytes>>20)
	}
}

// Give a sandbox an API token it can use but never read: the egress enforcer adds it
// to the sandbox's requests to api.example.com.
func ExampleClient_Vault() {
	ctx := context.Background()
	c, _ := sandgate.NewFromEnv()
	sb, err := c.CreateSandbox(ctx, sandgate.CreateRequest{
		Image: &sandgate.Image{URI: "sandgate/base:0.1.0"}, Entrypoint: []string{"tail", "-f", "/dev/null"},
		NetworkPolicy:   &sandgate.NetworkPolicy{DefaultAction: "deny", Egress: []sandgate.EgressRule{{Action: "allow", Target: "api.example.com"}}},
		CredentialProxy: &sandgate.CredentialProxy{Enabled: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	v, _ := c.Vault(ctx, sb.ID)
	st, err := v.Create(ctx,
		[]sandgate.Credential{sandgate.InlineCredential("api-token", os.Getenv("API_TOKEN"))},
		[]sandgate.Binding{{Name: "api", Match: sandgate.BindingMatch{Hosts: []string{"api.example.com"}},
			Auth: sandgate.BindingAuth{Type: sandgate.AuthBearer, Credential: "api-token"}}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("vault revision", st.Revision)
}
