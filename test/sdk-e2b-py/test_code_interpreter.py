"""The published E2B code interpreter SDK (e2b-code-interpreter) through the E2B door:
its default template (code-interpreter-v1, sandgate/e2b-code-interpreter), its calls
routed by header to port 49999, which the sandbox's agent serves; code runs with
results, output and errors, in contexts it creates, lists, restarts and removes. A
token of another sandbox opens nothing."""

import httpx
import pytest

from conftest import REQUEST, RUN, SANDBOX_URL
from e2b_code_interpreter import Sandbox


@pytest.fixture(scope="module")
def sbx():
    s = Sandbox.create(metadata={"run": RUN, "case": "code"}, timeout=600, request_timeout=REQUEST)
    yield s
    s.kill()


def test_run_code(sbx):
    execution = sbx.run_code("x = 40 + 2\nprint('hello')\nx", timeout=REQUEST)
    assert execution.error is None, execution.error
    assert execution.text == "42"
    assert "hello\n" in "".join(execution.logs.stdout)


def test_error(sbx):
    execution = sbx.run_code("undefined_name", timeout=REQUEST)
    assert execution.error is not None
    assert execution.error.name == "NameError"


def test_contexts(sbx):
    ctx = sbx.create_code_context(language="python")
    assert sbx.run_code("y = 7", context=ctx, timeout=REQUEST).error is None
    assert sbx.run_code("y * 6", context=ctx, timeout=REQUEST).text == "42"
    assert ctx.id in [c.id for c in sbx.list_code_contexts()]
    sbx.restart_code_context(ctx)
    assert sbx.run_code("y", context=ctx, timeout=REQUEST).error.name == "NameError"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]


def test_another_sandboxs_token_opens_nothing(sbx):
    other = Sandbox.create(metadata={"run": RUN, "case": "code-other"}, request_timeout=REQUEST)
    try:
        for header, token in (("X-Access-Token", other._envd_access_token), ("E2B-Traffic-Access-Token", other.traffic_access_token)):
            r = httpx.get(
                f"{SANDBOX_URL}/health",
                headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49999", header: token},
            )
            assert r.status_code == 403, (header, r.status_code, r.text)
    finally:
        other.kill()
