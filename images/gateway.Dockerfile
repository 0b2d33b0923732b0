# sandgate/gateway: the static sandgate binary (built with CGO_ENABLED=0), the CA
# certificates it verifies upstream TLS with (registries, egress through the vault,
# webhooks), and the two writable places it expects: $HOME (/var/lib/sandgate, where
# Caddy keeps its storage and the plugin cache lives) and /tmp. It runs as 65532:65532,
# the same user deploy/ and the Helm chart give the Pod, so it never needs root.
#
# images/gateway.sh builds it from a context holding only these files:
#   docker build -f images/gateway.Dockerfile --build-arg VERSION=0.1.0 CONTEXT
# FROM scratch needs no registry, and the classic builder (DOCKER_BUILDKIT=0) needs no
# BuildKit.
FROM scratch
ARG VERSION=dev
# rootfs/ holds /etc/passwd and /etc/group (user sandgate, 65532), the CA bundle and
# /tmp (mode 1777: a copied directory keeps its mode only below the copy's root).
COPY rootfs/ /
COPY --chown=65532:65532 home /var/lib/sandgate
COPY sandgate /sandgate
ENV HOME=/var/lib/sandgate \
    SANDGATE_PLUGIN_CACHE_DIR=/var/lib/sandgate/plugins
WORKDIR /var/lib/sandgate
USER 65532:65532
EXPOSE 8080
LABEL org.opencontainers.image.title="sandgate-gateway" \
      org.opencontainers.image.description="sandgate: sandbox lifecycle API gateway (Caddy with sandgate's modules)" \
      org.opencontainers.image.version="${VERSION}"
ENTRYPOINT ["/sandgate"]
CMD ["run"]
