"""Snapshots and forks through the E2B door: a snapshot is a template (a create names
its id), listed by its sandbox and name, deleted like a template; a named one is E2B's
namespaced template name, namespace/alias:tag, in the caller's tenant's namespace. A
fork answers its started copies, each a sandbox of its own with its own tokens.
Another tenant sees none of them, and its names are its own."""

import pytest

from conftest import OTHER_KEY, REQUEST, RUN
from e2b import Sandbox, SandboxNotFoundException, SandboxQuery, SandboxState


def test_snapshot_is_a_template(sandboxes):
    src = sandboxes.create(metadata={"run": RUN, "case": "snapshot"}, timeout=600)
    snap = src.create_snapshot(name=f"snap-{RUN}", request_timeout=REQUEST)
    namespace, _, rest = snap.snapshot_id.partition("/")
    assert namespace and rest == f"snap-{RUN}:default", snap.snapshot_id
    assert snap.names == [f"{namespace}/snap-{RUN}"]

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


def test_namespaced_names(sandboxes):
    src = sandboxes.create(metadata={"run": RUN, "case": "names"}, timeout=600)
    assert src.commands.run("echo first > /home/user/which").exit_code == 0
    first = src.create_snapshot(name=f"Names-{RUN}", request_timeout=REQUEST)
    namespace = first.snapshot_id.split("/")[0]
    assert first.snapshot_id == f"{namespace}/names-{RUN}:default"  # lower-cased, the default tag
    assert src.commands.run("echo tagged > /home/user/which").exit_code == 0
    tagged = src.create_snapshot(name=f"{namespace}/names-{RUN}:v2", request_timeout=REQUEST)
    assert (tagged.snapshot_id, tagged.names) == (f"{namespace}/names-{RUN}:v2", [f"{namespace}/names-{RUN}"])

    # Listed by the name with and without its namespace, with and without a tag.
    def listed(name, **kw):
        return sorted(s.snapshot_id for s in Sandbox.list_snapshots(name=name, **kw).next_items())

    both = sorted([first.snapshot_id, tagged.snapshot_id])
    assert listed(f"names-{RUN}") == both
    assert listed(f"{namespace}/names-{RUN}") == both
    assert listed(f"names-{RUN}:v2") == [tagged.snapshot_id]
    assert listed(f"{namespace}/names-{RUN}:default") == [first.snapshot_id]
    assert listed(f"other-namespace/names-{RUN}") == []

    # A create names it in every form; without a tag it is the default one.
    for template, want in [
        (f"names-{RUN}", "first"),
        (f"{namespace}/names-{RUN}:v2", "tagged"),
        (first.snapshot_id, "first"),
    ]:
        copy = sandboxes.create(template=template, metadata={"run": RUN, "case": "names-copy"})
        assert copy.files.read("/home/user/which").strip() == want, template
        assert copy.get_info().template_id == template
        # The list names the template as the get does, and a filter by the snapshot's
        # id finds it whichever form the create gave.
        snapshot_id = first.snapshot_id if want == "first" else tagged.snapshot_id
        found = Sandbox.list(query=SandboxQuery(metadata={"run": RUN, "case": "names-copy"}, template=snapshot_id)).next_items()
        assert [(s.sandbox_id, s.template_id) for s in found] == [(copy.sandbox_id, template)], template
        copy.kill()

    # A name in another namespace is refused to a snapshot, and no template.
    with pytest.raises(Exception) as refused:
        src.create_snapshot(name=f"not-{namespace}/names-{RUN}", request_timeout=REQUEST)
    assert "namespace" in str(refused.value)
    with pytest.raises(Exception):
        Sandbox.create(template=f"not-{namespace}/names-{RUN}", request_timeout=REQUEST)

    # Deleting the name without a tag deletes every tag of it.
    assert Sandbox.delete_snapshot(f"{namespace}/names-{RUN}") is True
    assert listed(f"names-{RUN}") == []
    assert Sandbox.delete_snapshot(tagged.snapshot_id) is False


def test_names_are_the_tenants_own(sandboxes):
    mine = sandboxes.create(metadata={"run": RUN, "case": "names-mine"}, timeout=600)
    assert mine.commands.run("echo mine > /home/user/whose").exit_code == 0
    my_snap = mine.create_snapshot(name=f"shared-{RUN}", request_timeout=REQUEST)
    my_namespace = my_snap.snapshot_id.split("/")[0]

    # Another tenant finds nothing by the name, in any form, and cannot take the
    # namespace.
    assert Sandbox.list_snapshots(name=f"shared-{RUN}", api_key=OTHER_KEY).next_items() == []
    assert Sandbox.list_snapshots(name=my_snap.snapshot_id, api_key=OTHER_KEY).next_items() == []
    for template in (f"shared-{RUN}", my_snap.snapshot_id):
        with pytest.raises(Exception) as refused:
            Sandbox.create(template=template, api_key=OTHER_KEY, request_timeout=REQUEST)
        assert "not known" in str(refused.value), refused.value
    assert Sandbox.delete_snapshot(my_snap.snapshot_id, api_key=OTHER_KEY) is False
    assert Sandbox.delete_snapshot(f"shared-{RUN}", api_key=OTHER_KEY) is False

    # Its snapshot of the same name is its own, in its own namespace; each tenant's
    # name leads to its own snapshot.
    theirs = sandboxes.create(api_key=OTHER_KEY, metadata={"run": RUN, "case": "names-theirs"}, timeout=600)
    assert theirs.commands.run("echo theirs > /home/user/whose").exit_code == 0
    with pytest.raises(Exception):
        theirs.create_snapshot(name=my_snap.snapshot_id, request_timeout=REQUEST)
    their_snap = theirs.create_snapshot(name=f"shared-{RUN}", request_timeout=REQUEST)
    their_namespace = their_snap.snapshot_id.split("/")[0]
    assert their_namespace != my_namespace
    assert their_snap.snapshot_id == f"{their_namespace}/shared-{RUN}:default"

    for key, want in ((None, "mine"), (OTHER_KEY, "theirs")):
        kw = {"api_key": key} if key else {}
        copy = sandboxes.create(template=f"shared-{RUN}", metadata={"run": RUN, "case": "names-whose"}, **kw)
        assert copy.files.read("/home/user/whose").strip() == want
        copy.kill()

    assert Sandbox.delete_snapshot(their_snap.snapshot_id, api_key=OTHER_KEY) is True
    assert Sandbox.delete_snapshot(my_snap.snapshot_id) is True
