"""Snapshots and forks through the E2B door: a snapshot is a template (a create names
its id), listed by its sandbox and name, deleted like a template; a fork answers its
started copies, each a sandbox of its own with its own tokens. Another tenant sees
none of them."""

import pytest

from conftest import OTHER_KEY, REQUEST, RUN
from e2b import Sandbox, SandboxNotFoundException, SandboxQuery, SandboxState


def test_snapshot_is_a_template(sandboxes):
    src = sandboxes.create(metadata={"run": RUN, "case": "snapshot"}, timeout=600)
    snap = src.create_snapshot(name=f"snap-{RUN}", request_timeout=REQUEST)
    assert snap.snapshot_id
    assert snap.names == [f"snap-{RUN}"]

    listed = Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items()
    assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
    named = Sandbox.list_snapshots(name=f"snap-{RUN}").next_items()
    assert [s.snapshot_id for s in named] == [snap.snapshot_id]
    assert Sandbox.list_snapshots(sandbox_id=src.sandbox_id, api_key=OTHER_KEY).next_items() == []

    copy = sandboxes.create(template=snap.snapshot_id, metadata={"run": RUN, "case": "from-snapshot"})
    info = copy.get_info()
    assert info.template_id == snap.snapshot_id
    assert info.state == SandboxState.RUNNING
    assert copy._envd_access_token != src._envd_access_token
    from_snap = Sandbox.list(query=SandboxQuery(template=snap.snapshot_id)).next_items()
    assert [s.sandbox_id for s in from_snap] == [copy.sandbox_id]

    # Another tenant can neither create from it nor delete it.
    with pytest.raises(Exception):
        Sandbox.create(template=snap.snapshot_id, api_key=OTHER_KEY, request_timeout=REQUEST)
    assert Sandbox.delete_snapshot(snap.snapshot_id, api_key=OTHER_KEY) is False

    copy.kill()
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False


def test_fork(sandboxes):
    src = sandboxes.create(metadata={"run": RUN, "case": "fork"}, timeout=600)
    copies = src.fork(count=2, request_timeout=REQUEST)
    assert len(copies) == 2
    for c in copies:
        assert not isinstance(c, Exception), c
        sandboxes.created.append(c)
        assert c.sandbox_id != src.sandbox_id
        assert c._envd_access_token != src._envd_access_token
        assert c.get_info().state == SandboxState.RUNNING
    assert copies[0]._envd_access_token != copies[1]._envd_access_token
    with pytest.raises(SandboxNotFoundException):
        Sandbox.fork(src.sandbox_id, count=1, api_key=OTHER_KEY)
