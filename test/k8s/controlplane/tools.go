//go:build tools

// Package controlplane pins the Kubernetes control-plane commands and the kubelet that scripts/k8s.sh
// builds from the Go module proxy for the local test cluster. It is a module of its own
// (see go.mod) so that none of these dependencies enter the root module; nothing here is
// compiled into sandgate.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
