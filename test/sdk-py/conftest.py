"""The published OpenSandbox Python SDK (opensandbox, opensandbox-code-interpreter)
driven against a sandgate gateway, as a new user would drive it: only the server
address changes.

Run by test/e2e TestSDKPy, which starts the gateway, the servers the egress and vault
tests reach, and the host directories the volume tests mount, and passes, in the
environment:

  SANDGATE_SDK_DOMAIN          host:port of the gateway (loopback)
  SANDGATE_SDK_API_KEY         the tenant's API key
  SANDGATE_SDK_IMAGE           the sandbox image (sandgate/base:<VERSION>)
  SANDGATE_SDK_CODE_IMAGE      the code interpreter image (sandgate/code-interpreter:<VERSION>)
  SANDGATE_SDK_RUN             a random token of this run (metadata, volume claim names)
  SANDGATE_SDK_EGRESS_ALLOWED  name of an HTTP server (port 8000) on the sandbox network
  SANDGATE_SDK_EGRESS_DENIED   name of a second one, which no policy below allows
  SANDGATE_SDK_VAULT_HOST      name of an HTTPS echo server (port 443) on the sandbox
                               network, answering the SHA-256 of the Authorization and
                               X-Api-Key headers it received
  SANDGATE_SDK_VAULT_SECRET    the real credential (host side only)
  SANDGATE_SDK_HOST_PREFIX     a host directory the gateway allows host volumes under
  SANDGATE_SDK_HOST_RW         a writable directory under it
  SANDGATE_SDK_HOST_RO         a directory under it holding the file `given`

Every sandbox a test creates is killed when its fixture ends.
"""

import os
from datetime import timedelta

import pytest

from opensandbox.config.connection_sync import ConnectionConfigSync
from opensandbox.sync import SandboxManagerSync, SandboxSync


def must_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set (the suite is run by test/e2e TestSDKPy)")
    return value


DOMAIN = must_env("SANDGATE_SDK_DOMAIN")
API_KEY = must_env("SANDGATE_SDK_API_KEY")
IMAGE = must_env("SANDGATE_SDK_IMAGE")
RUN = must_env("SANDGATE_SDK_RUN")

# Creates on two shared cores may take a while; the SDK's own defaults (30 s) are for
# an idle server.
READY = timedelta(seconds=180)
REQUEST = timedelta(seconds=180)


def connection() -> ConnectionConfigSync:
    """The connection a user configures: the gateway's address, key and plain http."""
    return ConnectionConfigSync(domain=DOMAIN, api_key=API_KEY, protocol="http", request_timeout=REQUEST)


class Sandboxes:
    """Creates sandboxes the SDK way and kills each one at the end."""

    def __init__(self) -> None:
        self.created: list[SandboxSync] = []

    def create(self, image: str = IMAGE, **kwargs) -> SandboxSync:
        kwargs.setdefault("timeout", timedelta(minutes=10))
        kwargs.setdefault("ready_timeout", READY)
        sbx = SandboxSync.create(image, connection_config=connection(), **kwargs)
        self.created.append(sbx)
        return sbx

    def kill_all(self) -> None:
        for sbx in self.created:
            try:
                sbx.kill()
            except Exception:
                pass  # already killed by the test
            sbx.close()


@pytest.fixture(scope="module")
def sandboxes():
    s = Sandboxes()
    yield s
    s.kill_all()


@pytest.fixture(scope="module")
def manager():
    m = SandboxManagerSync.create(connection_config=connection())
    yield m
    m.close()

