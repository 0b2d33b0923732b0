"""Lifecycle: create, info, list, metadata, renew, pause and resume, kill, and a
sandbox without a timeout (manual cleanup). The async client is used once too."""

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest

from conftest import API_KEY, DOMAIN, IMAGE, READY, REQUEST, RUN
from opensandbox import Sandbox
from opensandbox.config import ConnectionConfig
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.sandboxes import SandboxFilter
from opensandbox.sync import SandboxSync


def wait_state(sbx, want: str, budget: float = 120) -> str:
    deadline = time.monotonic() + budget
    state = ""
    while time.monotonic() < deadline:
        state = sbx.get_info().status.state
        if state == want:
            return state
        time.sleep(0.5)
    return state


@pytest.fixture(scope="module")
def sbx(sandboxes):
    return sandboxes.create(metadata={"suite": "sdk-py", "run": RUN, "role": "lifecycle"}, env={"GREETING": "hi"})


def test_create_answers_a_running_sandbox_with_its_metadata(sbx):
    info = sbx.get_info()
    assert info.id == sbx.id
    assert info.status.state == "Running"
    assert info.metadata == {"suite": "sdk-py", "run": RUN, "role": "lifecycle"}
    assert info.image is not None and info.image.image == IMAGE
    assert info.entrypoint == ["tail", "-f", "/dev/null"]
    assert info.expires_at is not None
    # The SDK asked for ten minutes.
    left = info.expires_at - datetime.now(timezone.utc)
    assert timedelta(minutes=8) < left <= timedelta(minutes=10, seconds=5), left
    assert sbx.is_healthy()
    assert sbx.commands.run("echo $GREETING").text == "hi"


def test_list_filters_by_metadata_and_state(sbx, sandboxes, manager):
    other = sandboxes.create(metadata={"suite": "sdk-py", "run": RUN, "role": "other"})
    mine = manager.list_sandbox_infos(SandboxFilter(metadata={"run": RUN, "role": "lifecycle"}))
    assert [s.id for s in mine.sandbox_infos] == [sbx.id]
    both = manager.list_sandbox_infos(SandboxFilter(metadata={"run": RUN}, states=["Running"]))
    assert {s.id for s in both.sandbox_infos} >= {sbx.id, other.id}
    assert both.pagination.total_items == len(both.sandbox_infos)
    paused = manager.list_sandbox_infos(SandboxFilter(metadata={"run": RUN}, states=["Paused"]))
    assert paused.sandbox_infos == []
    page = manager.list_sandbox_infos(SandboxFilter(metadata={"run": RUN}, page_size=1, page=1))
    assert len(page.sandbox_infos) == 1 and page.pagination.has_next_page
    assert manager.get_sandbox_info(other.id).metadata["role"] == "other"


def test_patch_metadata_adds_and_deletes_keys(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "role": "patch", "gone": "soon"})
    info = sbx.patch_metadata({"added": "yes", "gone": None})
    assert info.metadata == {"run": RUN, "role": "patch", "added": "yes"}
    assert sbx.get_info().metadata == info.metadata


def test_renew_moves_the_expiry(sbx, manager):
    before = sbx.get_info().expires_at
    renewed = sbx.renew(timedelta(minutes=30))
    assert renewed.expires_at > before + timedelta(minutes=15)
    assert abs((sbx.get_info().expires_at - renewed.expires_at).total_seconds()) < 1
    again = manager.renew_sandbox(sbx.id, timedelta(minutes=20))
    assert again.expires_at < renewed.expires_at


def test_endpoint_for_the_agent_points_at_the_gateway(sbx):
    ep = sbx.get_endpoint(44772)
    assert ep.endpoint.startswith(DOMAIN), ep.endpoint
    assert ep.headers, "the endpoint carries no access header"


def test_pause_then_resume_keeps_the_sandbox(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "role": "pause"})
    sbx.files.write_file("/tmp/kept", "before the pause")
    sbx.pause()
    assert wait_state(sbx, "Paused") == "Paused"
    with pytest.raises(SandboxApiException) as err:
        sbx.pause()
    assert err.value.status_code == 409
    resumed = SandboxSync.resume(sbx.id, connection_config=sbx.connection_config, resume_timeout=READY)
    try:
        assert resumed.get_info().status.state == "Running"
        assert resumed.files.read_file("/tmp/kept") == "before the pause"
        assert resumed.commands.run("echo back").text == "back"
    finally:
        resumed.close()


def test_kill_removes_the_sandbox(sandboxes, manager):
    sbx = sandboxes.create(metadata={"run": RUN, "role": "kill"})
    sbx.kill()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            state = manager.get_sandbox_info(sbx.id).status.state
        except SandboxApiException as e:
            assert e.status_code == 404
            break
        if state == "Terminated":
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"sandbox still {state} a minute after kill")
    with pytest.raises(SandboxApiException) as err:
        sbx.commands.run("true")
    assert err.value.status_code in (404, 409, 502, 503)


def test_without_a_timeout_the_sandbox_has_no_expiry(sandboxes, manager):
    sbx = sandboxes.create(timeout=None, metadata={"run": RUN, "role": "manual"})
    info = sbx.get_info()
    assert info.status.state == "Running"
    assert info.expires_at is None
    listed = manager.list_sandbox_infos(SandboxFilter(metadata={"run": RUN, "role": "manual"}))
    assert [s.expires_at for s in listed.sandbox_infos] == [None]
    assert sbx.commands.run("echo alive").text == "alive"
    sbx.kill()


def test_the_async_client_creates_runs_and_kills():
    async def scenario():
        config = ConnectionConfig(domain=DOMAIN, api_key=API_KEY, protocol="http", request_timeout=REQUEST)
        sbx = await Sandbox.create(IMAGE, connection_config=config, ready_timeout=READY, metadata={"run": RUN, "role": "async"})
        try:
            assert (await sbx.get_info()).status.state == "Running"
            run = await sbx.commands.run("echo from-async")
            assert run.text == "from-async"
            await sbx.files.write_file("/tmp/a.txt", "async")
            assert await sbx.files.read_file("/tmp/a.txt") == "async"
        finally:
            await sbx.destroy()

    asyncio.run(scenario())
