# sandgate/agent: nothing but the static sandbox-agent at /sandbox-agent. The Kubernetes
# runtime's init container copies it into each sandbox Pod, and the Pod's egress-enforcer
# sidecar runs it. No USER: the sidecar programs nftables in its Pod's network namespace,
# which takes root with NET_ADMIN; the Pod spec, not the image, drops what the workload
# must not have (see runtimes/kubernetes).
#
# images/agent.sh builds it from a context holding only the binary:
#   docker build -f images/agent.Dockerfile --build-arg VERSION=0.1.0 CONTEXT
# FROM scratch needs no registry, and the classic builder (DOCKER_BUILDKIT=0) needs no
# BuildKit.
FROM scratch
ARG VERSION=dev
COPY sandbox-agent /sandbox-agent
LABEL org.opencontainers.image.title="sandgate-agent" \
      org.opencontainers.image.description="sandgate's in-sandbox agent and egress enforcer" \
      org.opencontainers.image.version="${VERSION}"
ENTRYPOINT ["/sandbox-agent"]
CMD ["version"]
