// Command stages prints the pod and node lifecycle stages that kwok ships as its defaults,
// as one multi-document YAML stream. The kwok binary (unlike kwokctl) simulates nothing
// without stages in its configuration, so scripts/k8s.sh runs this once at build time
// and appends the output to the kwok configuration it writes for each cluster. Taking
// them from the kwok module keeps the simulated lifecycle the one kwok's authors test.
//
// The stages: nodes become Ready and keep a Lease (heartbeat), pods on a managed node
// become Running with a pod IP from the node's spec.podCIDR, Job pods complete, and a
// pod with a deletionTimestamp is removed at once (there is no kubelet to do it).
package main

import (
	"fmt"
	"os"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	docs := []string{
		nodefast.DefaultNodeInit,
		nodelease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for _, d := range docs {
		if _, err := fmt.Fprintf(os.Stdout, "---\n%s\n", strings.TrimSpace(d)); err != nil {
			fmt.Fprintln(os.Stderr, "stages:", err)
			os.Exit(1)
		}
	}
}
