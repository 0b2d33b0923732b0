//go:build tools

// Package etcd pins the etcd server that scripts/k8s.sh builds for the local test
// cluster. A module of its own because etcd's server release need not agree with the
// etcd client versions that k8s.io/kubernetes pins in the parent module.
package etcd

import _ "go.etcd.io/etcd/server/v3"
