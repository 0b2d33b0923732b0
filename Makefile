# sandgate — see README.md. Every target installs or builds what it needs itself.
SHELL := /bin/bash
VERSION := $(shell cat VERSION)
GO ?= go
# GOTAGS are build tags of bin/sandgate: `make run` builds with sandgate_nokubernetes
# (local Docker only, without the Kubernetes client, the largest part of a first
# compile: docs/DEVELOPING.md); every other target builds it all in.
GOTAGS ?=
LDFLAGS := -s -w -X github.com/sandgate/sandgate/gateway.Version=$(VERSION)

.PHONY: gvisor all deps build agent envd-proto sandgate web images gateway-image agent-image k8s-images plugins k8s registry helm k8s-up k8s-down run test test-unit test-e2e bench bench-quick clean

all: build

## deps: install docker.io, redis-server, debootstrap, nftables…; start dockerd if no daemon answers
deps:
	@scripts/timed.sh deps scripts/deps.sh

## gvisor: build runsc from the Go module proxy (slow: ~20 min cold) and register it with dockerd
gvisor: deps
	@scripts/gvisor.sh

## build: bin/sandgate and bin/sandbox-agent, both static (the gateway image is FROM scratch)
build: sandgate agent

## web: the console (npm ci when the lockfile changed, vite build into web/dist, embedded by sandgate)
web:
	@scripts/timed.sh "console (web)" scripts/web.sh

sandgate: web
	@CGO_ENABLED=0 scripts/timed.sh "go build bin/sandgate" $(GO) build -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o bin/sandgate ./caddy

agent:
	@CGO_ENABLED=0 scripts/timed.sh "go build bin/sandbox-agent" $(GO) build -ldflags '-s -w -X main.version=$(VERSION)' -o bin/sandbox-agent ./sandbox-agent

## envd-proto: regenerate the Go code of the E2B envd protocol (sandbox-agent/envd/spec)
envd-proto:
	@sandbox-agent/envd/spec/generate.sh

## images: sandbox base images built locally (debootstrap + docker import); skipped when present
images: deps
	@scripts/timed.sh "images" images/build.sh $(VERSION)

## gateway-image: sandgate/gateway:<version> from images/gateway.Dockerfile (FROM scratch:
## the static bin/sandgate, CA certificates, user 65532), by `docker build`
gateway-image: sandgate
	@images/gateway.sh $(VERSION) bin/sandgate

## agent-image: sandgate/agent:<version> from images/agent.Dockerfile (FROM scratch: the static bin/sandbox-agent)
agent-image: agent
	@images/agent.sh $(VERSION) bin/sandbox-agent

## k8s-images: the two images a Kubernetes deployment (deploy/, the Helm chart) runs
k8s-images: gateway-image agent-image

## plugins: the example WASM plugins (GOOS=wasip1)
plugins:
	@scripts/timed.sh "example plugins" plugins/examples/build.sh

## k8s: the local test control plane's binaries (kube-apiserver, -scheduler,
## -controller-manager, etcd, kwok) and its real node's (kubelet, pause, crireset), built from the Go module proxy and cached outside the
## repo (slow: ~20 min cold, then instant)
k8s: deps
	@scripts/timed.sh "Kubernetes binaries" scripts/k8s.sh build >/dev/null

## registry: the reference container registry (distribution/v3) the image pull tests run on
## loopback, built from the Go module proxy and cached outside the repo
registry: deps
	@scripts/timed.sh "registry" scripts/registry.sh build >/dev/null

## helm: the Helm command the chart's tests use (helm.sh/helm/v4 at test/helm/go.mod's pin),
## built from the Go module proxy and cached outside the repo
helm:
	@scripts/timed.sh "helm" scripts/helm.sh build >/dev/null

## k8s-up: start that control plane on loopback (3 kwok nodes; `scripts/k8s.sh up --node` adds a real one); prints the kubeconfig path last
k8s-up: deps
	@scripts/k8s.sh up

## k8s-down: stop what k8s-up started and remove its state
k8s-down:
	@scripts/k8s.sh down

## run: gateway on local Docker with the embedded store; the Go build, the console and the
## base image side by side, the large images built by the gateway once it serves
run: deps
	@scripts/run-build.sh
	@scripts/run.sh

## test: unit tests, Rego tests, the end-to-end suite against real Docker and Redis and the
## Kubernetes suite; what they need is built side by side, the Kubernetes binaries and Helm
## while the other packages are tested (scripts/test.sh)
test: deps
	@scripts/test.sh

## bench: hot-path figures, each beside its raw baseline; one table, and bench/results.json
bench: deps build images plugins k8s
	@scripts/bench.sh

## bench-quick: only the Docker figures of bench/results.json, fewer iterations (≤ 15 min)
bench-quick: deps build images
	@scripts/bench.sh --quick

clean:
	rm -rf bin
