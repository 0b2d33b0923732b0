// Command crireset removes every pod sandbox of a CRI runtime: it stops each one (which
// kills its containers, runs the CNI DEL that frees its address and veth, and removes
// its network namespace) and then removes it. `scripts/k8s.sh down` runs it against
// the real node's containerd after the kubelet has stopped, so nothing a pod made
// outside the node's state directory outlives the node.
//
// usage: crireset unix:///path/to/containerd.sock
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crireset unix:///path/to/containerd.sock")
		os.Exit(2)
	}
	if err := reset(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "crireset:", err)
		os.Exit(1)
	}
}

func reset(endpoint string) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect %s: %w", endpoint, err)
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var failed []error
	for _, sb := range list.Items {
		if _, err := client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			failed = append(failed, fmt.Errorf("stop %s (%s/%s): %w", sb.Id, sb.Metadata.GetNamespace(), sb.Metadata.GetName(), err))
			continue
		}
		if _, err := client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			failed = append(failed, fmt.Errorf("remove %s: %w", sb.Id, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d pod sandboxes: %v", len(failed), len(list.Items), failed)
	}
	fmt.Printf("crireset: removed %d pod sandboxes\n", len(list.Items))
	return nil
}
