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
