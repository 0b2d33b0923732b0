// Package k8s holds the tests and benchmarks of sandgate's Kubernetes runtime (package
// k8s_test; this file only documents them).
//
// They run against a real control plane on loopback, started by `scripts/k8s.sh up
// --node`: etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from
// source, kwok playing the kubelet of three fake nodes whose pod CIDRs lie in
// 127.64.0.0/16, and one real node.
// The gateway under test is the real bin/sandgate with SANDGATE_RUNTIME=kubernetes on a
// real redis-server; every pod it creates is a real API object, scheduled by the real
// scheduler, watched by the gateway's informer and deleted through the API.
//
// On the kwok nodes only the container runtime is simulated. kwok marks a scheduled pod
// Running and gives it a loopback IP; the tests' stand-in for the kubelet's container
// runtime (agents_test.go) then starts a real bin/sandbox-agent, PID 1 of its own PID
// namespace (unshare), bound to that IP on port 44772, with the command and environment
// written in the pod's workload container (the agent token, the user's env, `sandbox-agent
// init -- <entrypoint>`), and stops it when the pod goes. So create → agent → command is
// real end to end.
//
// What only a real node does (running the pod's images, the init container copying the agent, the
// egress sidecar's nftables rules in the pod's own network namespace, a container's
// death) runs on the cluster's one real node: a kubelet on a containerd of its own
// (scripts/k8s-node.sh), tainted so that only the TestRealNode* tests' pods land there
// (realnode_test.go). docs/kubernetes.md lists what each of those tests shows.
//
// The binaries are built by `scripts/k8s.sh build` (the `k8s` prerequisite of `make
// test`); the tests fail, naming that command, when they are missing.
package k8s
