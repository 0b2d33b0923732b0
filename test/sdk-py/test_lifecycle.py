"""Lifecycle: create, info, list, metadata, renew, pause and resume, kill, and a
sandbox without a timeout (manual cleanup). The async client is used once too."""

import asyncio
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from conftest import API_KEY, DOMAIN, IMAGE, READY, REQUEST, RUN, connection
from opensandbox import Sandbox
from opensandbox.config import ConnectionConfig
from opensandbox.config.connection_sync import ConnectionConfigSync
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.execd import RunCommandOpts
from opensandbox.models.sandboxes import SandboxFilter, SnapshotFilter
from opensandbox.sync import SandboxManagerSync, SandboxSync


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


def test_a_port_of_the_sandbox_is_reached_through_its_endpoint(sbx):
    sbx.commands.run("mkdir -p /tmp/www && echo served-from-sandbox > /tmp/www/index.html && "
                     "cd /tmp/www && python3 -m http.server 8080 --bind 0.0.0.0", opts=RunCommandOpts(background=True))
    ep = sbx.get_endpoint(8080)
    deadline = time.monotonic() + 30
    while True:
        r = httpx.get(f"http://{ep.endpoint}/index.html", headers=ep.headers, timeout=10)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert r.status_code == 200 and r.text == "served-from-sandbox\n"
    signed = sbx.get_signed_endpoint(8080, int(time.time()) + 300)
    r = httpx.get(f"http://{signed.endpoint}/index.html", headers=signed.headers, timeout=10)
    assert r.status_code == 200 and r.text == "served-from-sandbox\n"
    assert httpx.get(f"http://{ep.endpoint}/index.html", timeout=10).status_code in (401, 403)


def test_connect_to_an_existing_sandbox(sbx):
    again = SandboxSync.connect(sbx.id, connection_config=connection(), connect_timeout=READY)
    try:
        assert again.get_info().id == sbx.id
        assert again.commands.run("echo $GREETING").text == "hi"
    finally:
        again.close()


def test_server_proxy_mode_reaches_the_agent_and_egress_api(sbx):
    config = ConnectionConfigSync(domain=DOMAIN, api_key=API_KEY, protocol="http", request_timeout=REQUEST, use_server_proxy=True)
    proxied = SandboxSync.connect(sbx.id, connection_config=config, connect_timeout=READY)
    try:
        assert proxied.commands.run("echo through-the-proxy").text == "through-the-proxy"
        proxied.files.write_file("/tmp/proxied.txt", "p")
        assert proxied.files.read_file("/tmp/proxied.txt") == "p"
    finally:
        proxied.close()


def test_metrics_describe_the_sandbox(sbx):
    m = sbx.get_metrics()
    assert m.cpu_count > 0
    assert 0 <= m.cpu_used_percentage <= 100 * m.cpu_count
    assert 0 < m.memory_used_in_mib <= m.memory_total_in_mib
    assert m.timestamp > 0


def test_diagnostics_read_output_and_events(sbx):
    sbx.commands.run("echo diagnostics-marker")
    events = sbx.get_diagnostic_events("all")
    assert (events.sandbox_id, events.kind, events.scope, events.delivery) == (sbx.id, "events", "all", "inline")
    assert "sandbox.created" in (events.content or "")
    logs = sbx.get_diagnostic_logs("container")
    assert (logs.kind, logs.delivery) == ("logs", "inline")


def test_unknown_sandbox_and_wrong_key_are_errors_with_codes(manager):
    with pytest.raises(SandboxApiException) as err:
        manager.get_sandbox_info("00000000-0000-4000-8000-000000000000")
    assert err.value.status_code == 404
    assert err.value.error.code == "SANDBOX::NOT_FOUND"
    wrong = SandboxManagerSync.create(connection_config=ConnectionConfigSync(domain=DOMAIN, api_key="not-the-key", protocol="http"))
    try:
        with pytest.raises(SandboxApiException) as err:
            wrong.list_sandbox_infos(SandboxFilter())
        assert err.value.status_code == 401
        assert err.value.error.code == "INVALID_API_KEY"
    finally:
        wrong.close()


def test_snapshot_then_create_from_it(sandboxes, manager):
    src = sandboxes.create(metadata={"run": RUN, "role": "snapshot-source"})
    src.files.write_file("/root/snap.txt", "captured")
    snap = src.create_snapshot(name=f"sdkpy-{RUN}")
    try:
        assert snap.sandbox_id == src.id
        deadline = time.monotonic() + 120
        while snap.status.state != "Ready" and time.monotonic() < deadline:
            assert snap.status.state == "Creating", snap.status
            time.sleep(0.5)
            snap = manager.get_snapshot(snap.id)
        assert snap.status.state == "Ready"
        listed = manager.list_snapshots(SnapshotFilter(sandbox_id=src.id))
        assert [s.id for s in listed.snapshot_infos] == [snap.id]
        copy = sandboxes.create(None, snapshot_id=snap.id, metadata={"run": RUN, "role": "snapshot-copy"})
        try:
            assert copy.files.read_file("/root/snap.txt") == "captured"
            with pytest.raises(SandboxApiException) as err:
                manager.delete_snapshot(snap.id)
            assert (err.value.status_code, err.value.error.code) == (409, "SNAPSHOT::IN_USE")
        finally:
            copy.kill()
    finally:
        # The image is released shortly after the last sandbox made from it goes.
        deadline = time.monotonic() + 60
        while True:
            try:
                manager.delete_snapshot(snap.id)
                break
            except SandboxApiException as e:
                if e.status_code != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    with pytest.raises(SandboxApiException) as err:
        manager.get_snapshot(snap.id)
    assert err.value.status_code == 404


def test_a_copy_names_its_snapshot(sandboxes, manager):
    src = sandboxes.create(metadata={"run": RUN, "role": "snapshot-named"})
    snap = src.create_snapshot()
    try:
        deadline = time.monotonic() + 120
        while snap.status.state != "Ready" and time.monotonic() < deadline:
            time.sleep(0.5)
            snap = manager.get_snapshot(snap.id)
        copy = sandboxes.create(None, snapshot_id=snap.id, metadata={"run": RUN, "role": "snapshot-named-copy"})
        try:
            assert copy.get_info().snapshot_id == snap.id
        finally:
            copy.kill()
    finally:
        deadline = time.monotonic() + 60
        while True:
            try:
                manager.delete_snapshot(snap.id)
                break
            except SandboxApiException as e:
                if e.status_code != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def test_pause_then_resume_keeps_the_sandbox(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "role": "pause"})
    sbx.files.write_file("/tmp/kept", "before the pause")
    sbx.pause()
    assert wait_state(sbx, "Paused") == "Paused"
    resumed = SandboxSync.resume(sbx.id, connection_config=sbx.connection_config, resume_timeout=READY)
    try:
        assert resumed.get_info().status.state == "Running"
        assert resumed.files.read_file("/tmp/kept") == "before the pause"
        assert resumed.commands.run("echo back").text == "back"
    finally:
        resumed.close()
    with pytest.raises(SandboxApiException) as err:
        SandboxSync.resume(sbx.id, connection_config=connection(), resume_timeout=READY)
    assert (err.value.status_code, err.value.error.code) == (409, "SANDBOX::NOT_PAUSED")


def test_a_second_pause_is_a_conflict(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "role": "pause-twice"})
    sbx.pause()
    assert wait_state(sbx, "Paused") == "Paused"
    for _ in range(5):
        with pytest.raises(SandboxApiException) as err:
            sbx.pause()
        assert (err.value.status_code, err.value.error.code) == (409, "SANDBOX::NOT_RUNNING")
        time.sleep(0.5)


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
