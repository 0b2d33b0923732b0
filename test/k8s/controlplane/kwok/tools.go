//go:build tools

// Package kwok pins kwok, which scripts/k8s.sh builds to simulate the nodes and pods
// of the local test cluster. A module of its own because kwok pins its own k8s.io/*
// versions, which need not match the control plane's.
package kwok

import _ "sigs.k8s.io/kwok/cmd/kwok"
