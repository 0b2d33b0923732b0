"""The published E2B Python SDKs (e2b, e2b-code-interpreter) driven against a sandgate
gateway's E2B door, as a team that moves its E2B code to sandgate drives them: only
E2B's own environment variables change.

Run by test/e2e TestSDKE2BPy, which starts the gateway and passes, in the environment:

  E2B_API_URL                  http://<gateway>/e2b, the door's control API
  E2B_SANDBOX_URL              http://<gateway>, where calls into sandboxes go
  E2B_API_KEY                  a tenant's API key
  SANDGATE_SDK_OTHER_KEY       the API key of another tenant
  SANDGATE_SDK_RUN             a random token of this run (metadata)
  SANDGATE_SDK_E2B_DOMAIN      the gateway's preview domain (test_signed_urls.py)

Every sandbox a test creates is killed when its fixture ends.
"""

import os

import pytest

from e2b import Sandbox


def must_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set (the suite is run by test/e2e TestSDKE2BPy)")
    return value


API_URL = must_env("E2B_API_URL")
SANDBOX_URL = must_env("E2B_SANDBOX_URL")
API_KEY = must_env("E2B_API_KEY")
OTHER_KEY = must_env("SANDGATE_SDK_OTHER_KEY")
RUN = must_env("SANDGATE_SDK_RUN")

# Creates on two shared cores may take a while; the SDK's own default is for an idle
# server.
REQUEST = 180


class Sandboxes:
    """Creates sandboxes the SDK way and kills each one at the end."""

    def __init__(self) -> None:
        self.created: list[Sandbox] = []

    def create(self, **kwargs) -> Sandbox:
        kwargs.setdefault("request_timeout", REQUEST)
        sbx = Sandbox.create(**kwargs)
        self.created.append(sbx)
        return sbx

    def kill_all(self) -> None:
        for sbx in self.created:
            try:
                sbx.kill()
            except Exception:
                pass  # already killed by the test


@pytest.fixture(scope="module")
def sandboxes():
    s = Sandboxes()
    yield s
    s.kill_all()
