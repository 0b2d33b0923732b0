"""Volumes: host directories (read-write, read-only, a subPath of one) and a named
volume (pvc) shared by two sandboxes, mounted at a subPath in the second."""

import os
from pathlib import Path

import pytest

from conftest import RUN
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.sandboxes import PVC, Host, Volume

PREFIX = os.environ["SANDGATE_SDK_HOST_PREFIX"]
RW = os.environ["SANDGATE_SDK_HOST_RW"]
RO = os.environ["SANDGATE_SDK_HOST_RO"]
# Claim names carry the run's token, so that the Go test removes exactly this run's
# volumes whatever the suite leaves.
CLAIM = f"sdkpy-{RUN}"


def test_host_volumes_read_write_read_only_and_sub_path(sandboxes):
    Path(RW, "nested").mkdir(mode=0o777, exist_ok=True)
    os.chmod(Path(RW, "nested"), 0o777)
    Path(RW, "nested", "seed").write_text("seeded on the host\n")
    sbx = sandboxes.create(metadata={"run": RUN, "role": "host-volumes"}, volumes=[
        Volume(name="work", host=Host(path=RW), mount_path="/mnt/rw"),
        Volume(name="given", host=Host(path=RO), mount_path="/mnt/ro", read_only=True),
        Volume(name="nested", host=Host(path=PREFIX), mount_path="/mnt/nested", sub_path="rw/nested"),
    ])
    ex = sbx.commands.run("echo written-in-sandbox > /mnt/rw/out.txt")
    assert ex.exit_code == 0, str(ex)
    assert Path(RW, "out.txt").read_text() == "written-in-sandbox\n"
    assert sbx.files.read_file("/mnt/ro/given") == "from the host\n"
    refused = sbx.commands.run("echo x > /mnt/ro/new")
    assert refused.exit_code != 0
    assert not Path(RO, "new").exists()
    assert sbx.files.read_file("/mnt/nested/seed") == "seeded on the host\n"
    sbx.files.write_file("/mnt/nested/back", "through the sub path")
    assert Path(RW, "nested", "back").read_text() == "through the sub path"


def test_a_host_path_outside_the_allowed_prefixes_is_refused(sandboxes):
    with pytest.raises(SandboxApiException) as err:
        sandboxes.create(volumes=[Volume(name="etc", host=Host(path="/etc"), mount_path="/mnt/etc")])
    assert err.value.status_code == 403
    assert "VOLUME::HOST_NOT_ALLOWED" in f"{err.value} {err.value.response_body!r}"


def test_named_volume_is_shared_between_sandboxes(sandboxes):
    first = sandboxes.create(metadata={"run": RUN, "role": "pvc-1"}, volumes=[
        Volume(name="data", pvc=PVC(claim_name=CLAIM), mount_path="/data"),
    ])
    first.files.write_file("/data/project/notes.txt", "kept in the volume")
    second = sandboxes.create(metadata={"run": RUN, "role": "pvc-2"}, volumes=[
        Volume(name="data", pvc=PVC(claim_name=CLAIM, create_if_not_exists=False), mount_path="/work", read_only=True),
    ])
    assert second.files.read_file("/work/project/notes.txt") == "kept in the volume"
    assert second.commands.run("touch /work/x").exit_code != 0


def test_named_volume_at_a_sub_path(sandboxes):
    whole = sandboxes.create(metadata={"run": RUN, "role": "pvc-whole"}, volumes=[
        Volume(name="data", pvc=PVC(claim_name=CLAIM + "-sub"), mount_path="/data"),
    ])
    whole.files.write_file("/data/project/notes.txt", "in the sub path")
    volumes = [Volume(name="data", pvc=PVC(claim_name=CLAIM + "-sub", create_if_not_exists=False), mount_path="/work", sub_path="project")]
    # On an engine older than API 1.45 the runtime mounts the sub-path itself.
    sbx = sandboxes.create(metadata={"run": RUN, "role": "pvc-sub"}, volumes=volumes)
    assert sbx.files.read_file("/work/notes.txt") == "in the sub path"
    assert sbx.commands.run("ls -A /work").text == "notes.txt"


def test_a_missing_claim_without_create_if_not_exists_is_refused(sandboxes):
    with pytest.raises(SandboxApiException) as err:
        sandboxes.create(volumes=[Volume(name="data", pvc=PVC(claim_name=CLAIM + "-never", create_if_not_exists=False), mount_path="/data")])
    assert err.value.status_code == 404
    assert "VOLUME::NOT_FOUND" in f"{err.value} {err.value.response_body!r}"
