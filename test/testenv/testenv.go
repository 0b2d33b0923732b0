// Package testenv holds what the end-to-end suites and the core's unit tests share —
// test/e2e (sandgate on Docker), test/k8s (sandgate on Kubernetes), gateway/store: a
// private redis-server (redis.go) or Redis Cluster (cluster.go), the sandgate process
// (sandgate.go), a client of its API (client.go), bench/results.json figures
// (figures.go) and a few small helpers (helpers.go). Only tests import it.
package testenv
