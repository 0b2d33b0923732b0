"""Lifecycle through the E2B door, with the calls that need no envd inside the
sandbox: create (E2B's defaults, metadata), get_info, list with its filters (metadata,
state, template, start time), order and pages, set_timeout (longer and shorter), pause
and connect (which resumes), autoPause, metrics, kill, is_running of a killed sandbox
(routed by header to a sandbox that is gone), and what another tenant's key, a wrong
key and an unknown template get."""

import time
from datetime import datetime, timedelta, timezone

import pytest

from conftest import OTHER_KEY, REQUEST, RUN
from e2b import (
    AuthenticationException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)


def seconds_left(info) -> float:
    return (info.end_at - datetime.now(timezone.utc)).total_seconds()


def test_create_and_get_info(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "info"})
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id == "base"
    assert info.metadata == {"run": RUN, "case": "info"}
    assert info.state == SandboxState.RUNNING
    # E2B's default lifetime, 300 s, applies to creates through this door.
    assert 240 <= seconds_left(info) <= 305
    same = Sandbox.get_info(sbx.sandbox_id, request_timeout=REQUEST)
    assert same.sandbox_id == sbx.sandbox_id


def test_list_by_metadata_and_pages(sandboxes):
    first = sandboxes.create(metadata={"run": RUN, "case": "list"}, timeout=600)
    second = sandboxes.create(metadata={"run": RUN, "case": "list"}, timeout=600)
    sandboxes.create(metadata={"run": RUN, "case": "other"}, timeout=600)

    found = Sandbox.list(query=SandboxQuery(metadata={"run": RUN, "case": "list"})).next_items()
    assert sorted(s.sandbox_id for s in found) == sorted([first.sandbox_id, second.sandbox_id])

    pages = Sandbox.list(query=SandboxQuery(metadata={"run": RUN, "case": "list"}), limit=1)
    seen = []
    while pages.has_next:
        items = pages.next_items()
        assert len(items) == 1
        seen.extend(s.sandbox_id for s in items)
    assert sorted(seen) == sorted([first.sandbox_id, second.sandbox_id])

    running = Sandbox.list(query=SandboxQuery(metadata={"run": RUN}, state=[SandboxState.RUNNING])).next_items()
    assert first.sandbox_id in [s.sandbox_id for s in running]

    query = SandboxQuery(metadata={"run": RUN, "case": "list"}, template="base")
    newest = [s.sandbox_id for s in Sandbox.list(query=query).next_items()]
    oldest = [s.sandbox_id for s in Sandbox.list(query=query, order="asc").next_items()]
    assert newest == [second.sandbox_id, first.sandbox_id]
    assert oldest == [first.sandbox_id, second.sandbox_id]
    later = SandboxQuery(metadata={"run": RUN}, started_after=datetime.now(timezone.utc) + timedelta(hours=1))
    assert Sandbox.list(query=later).next_items() == []


def test_set_timeout_longer_and_shorter(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "timeout"}, timeout=120)
    sbx.set_timeout(900)
    assert 850 <= seconds_left(sbx.get_info()) <= 905
    sbx.set_timeout(90)
    assert 30 <= seconds_left(sbx.get_info()) <= 95


def test_pause_and_connect(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "pause"}, timeout=600)
    assert sbx.pause() is True
    assert sbx.get_info().state == SandboxState.PAUSED
    # A second pause is E2B's 409, which the SDK reports as False.
    assert Sandbox.pause(sbx.sandbox_id) is False
    resumed = Sandbox.connect(sbx.sandbox_id, request_timeout=REQUEST)
    assert resumed.sandbox_id == sbx.sandbox_id
    assert sbx.get_info().state == SandboxState.RUNNING
    # Connecting to a running sandbox answers it as it is.
    again = sbx.connect(request_timeout=REQUEST)
    assert again.sandbox_id == sbx.sandbox_id


def test_kill(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "kill"})
    assert sbx.kill() is True
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()
    assert Sandbox.kill(sbx.sandbox_id) is False
    # envd's health route of a sandbox that is gone: the gateway answers E2B's 502.
    assert sbx.is_running() is False


def test_another_tenant_sees_nothing(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "tenant"})
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sbx.sandbox_id, api_key=OTHER_KEY)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.set_timeout(sbx.sandbox_id, 60, api_key=OTHER_KEY)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.pause(sbx.sandbox_id, api_key=OTHER_KEY)
    assert Sandbox.kill(sbx.sandbox_id, api_key=OTHER_KEY) is False
    listed = Sandbox.list(query=SandboxQuery(metadata={"run": RUN}), api_key=OTHER_KEY).next_items()
    assert sbx.sandbox_id not in [s.sandbox_id for s in listed]
    assert sbx.get_info().state == SandboxState.RUNNING


def test_wrong_key_and_unknown_template():
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="sg_not-a-key", request_timeout=REQUEST)
    with pytest.raises(SandboxException):
        Sandbox.create(template="no-such-template", request_timeout=REQUEST)


def test_metrics(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "metrics"})
    # The gateway samples every sandbox's use every few seconds.
    deadline = time.monotonic() + 60
    metrics = sbx.get_metrics()
    while not metrics and time.monotonic() < deadline:
        time.sleep(1)
        metrics = sbx.get_metrics()
    assert metrics, "no sample of the sandbox's resource use within a minute"
    assert metrics[-1].mem_used > 0
    assert metrics[-1].cpu_used_pct >= 0


def test_auto_pause(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "auto-pause"}, timeout=2, lifecycle={"on_timeout": "pause"})
    assert sbx.get_info().lifecycle["on_timeout"] == "pause"
    deadline = time.monotonic() + 30
    while sbx.get_info().state != SandboxState.PAUSED:
        assert time.monotonic() < deadline, "the sandbox was not paused at its timeout"
        time.sleep(0.5)
    # Kept while paused, as in E2B; a connect resumes it with a timeout again.
    assert seconds_left(sbx.get_info()) > 3600
    Sandbox.connect(sbx.sandbox_id, timeout=120, request_timeout=REQUEST)
    info = sbx.get_info()
    assert info.state == SandboxState.RUNNING
    assert 60 <= seconds_left(info) <= 125
