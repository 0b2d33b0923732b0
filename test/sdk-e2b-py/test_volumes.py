"""Volumes through the E2B door: the tenant's named volumes, made, listed, read and
deleted with the SDK's Volume, mounted by a create's volume_mounts; what one sandbox
writes there another one reads. Another tenant's key can neither see, delete nor mount
them, and its volume of the same name is its own. The volume content API is not served:
the token a volume carries opens nothing."""

import time

import httpx
import pytest

from conftest import API_KEY, API_URL, OTHER_KEY, REQUEST, RUN, SANDBOX_URL
from e2b import Sandbox, Volume, VolumeException, VolumeNotFoundException


@pytest.fixture
def volume_name():
    name = f"vol-{RUN}"
    yield name
    for key in (None, OTHER_KEY):
        try:
            Volume.destroy(name, **({"api_key": key} if key else {}))
        except Exception:
            pass  # removed by the test, or still mounted by a sandbox it kills later


def test_volume_lifecycle(volume_name):
    vol = Volume.create(volume_name)
    assert vol.name == volume_name
    assert vol.volume_id
    assert vol.token

    assert volume_name in [v.name for v in Volume.list()]
    info = Volume.get_info(vol.volume_id)
    assert (info.volume_id, info.name) == (vol.volume_id, volume_name)

    with pytest.raises(VolumeException):
        Volume.create(volume_name)  # exists already

    assert Volume.destroy(vol.volume_id) is True
    assert volume_name not in [v.name for v in Volume.list()]
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info(vol.volume_id)
    assert Volume.destroy(vol.volume_id) is False

    # The make and the removal are in the tenant's audit stream (written in the
    # background), and in no other tenant's.
    assert audited(API_KEY, volume_name) == ["volume.created", "volume.deleted"]
    assert audited(OTHER_KEY, volume_name, wait=0) == []


def audited(key: str, volume: str, wait: float = 10) -> list[str]:
    """The types of the records of source "volume" about volume in key's tenant's audit
    stream, waiting up to wait seconds for two of them."""
    deadline = time.monotonic() + wait
    while True:
        r = httpx.get(f"{SANDBOX_URL}/v1/audit", params={"limit": 1000}, headers={"X-API-Key": key})
        assert r.status_code == 200, r.text
        types = [
            it["record"]["type"]
            for it in r.json()["items"]
            if it["source"] == "volume" and it["record"].get("volume") == volume
        ]
        if len(types) >= 2 or time.monotonic() >= deadline:
            return types
        time.sleep(0.2)


def test_volume_shared_by_two_sandboxes(sandboxes, volume_name):
    vol = Volume.create(volume_name)
    writer = sandboxes.create(metadata={"run": RUN, "case": "volume-writer"}, volume_mounts={"/mnt/data": vol})
    # A new volume's root is the sandbox's user's, as on E2B: `user` (the SDK's default)
    # writes there without sudo, by a command and by the files API.
    assert writer.commands.run("stat -c %U:%G /mnt/data").stdout.strip() == "user:user"
    done = writer.commands.run("echo written-by-the-first > /mnt/data/note.txt && mkdir /mnt/data/dir")
    assert done.exit_code == 0
    writer.files.write("/mnt/data/dir/by-files.txt", "written-by-files")
    # A volume a sandbox mounts is not removed from under it.
    with pytest.raises(VolumeException):
        Volume.destroy(vol.volume_id)
    writer.kill()

    reader = sandboxes.create(metadata={"run": RUN, "case": "volume-reader"}, volume_mounts={"/mnt/shared": volume_name})
    assert reader.files.read("/mnt/shared/note.txt").strip() == "written-by-the-first"
    assert reader.files.read("/mnt/shared/dir/by-files.txt") == "written-by-files"
    assert reader.commands.run("stat -c %U /mnt/shared/note.txt").stdout.strip() == "user"
    # What the first one's user wrote, the next one's user changes.
    assert reader.commands.run("echo appended >> /mnt/shared/note.txt").exit_code == 0
    reader.kill()

    assert Volume.destroy(vol.volume_id) is True


def test_volume_of_another_tenant(sandboxes, volume_name):
    vol = Volume.create(volume_name)
    owner = sandboxes.create(metadata={"run": RUN, "case": "volume-owner"}, volume_mounts={"/mnt/data": vol})
    assert owner.commands.run("echo secret > /mnt/data/secret.txt", user="root").exit_code == 0
    owner.kill()

    # Another tenant's key finds no such volume: not in its list, not by id, not to
    # delete, not to mount.
    assert volume_name not in [v.name for v in Volume.list(api_key=OTHER_KEY)]
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info(vol.volume_id, api_key=OTHER_KEY)
    assert Volume.destroy(vol.volume_id, api_key=OTHER_KEY) is False
    with pytest.raises(Exception) as refused:
        Sandbox.create(api_key=OTHER_KEY, volume_mounts={"/mnt/data": volume_name}, request_timeout=REQUEST)
    assert "not found" in str(refused.value)

    # Its own volume of the same name is another volume: the first tenant's file is not
    # in it.
    theirs = Volume.create(volume_name, api_key=OTHER_KEY)
    other = sandboxes.create(api_key=OTHER_KEY, metadata={"run": RUN, "case": "volume-other"}, volume_mounts={"/mnt/data": theirs})
    listing = other.commands.run("ls -A /mnt/data")
    assert listing.stdout.strip() == ""
    other.kill()
    assert Volume.destroy(theirs.volume_id, api_key=OTHER_KEY) is True

    # The first tenant's volume is still there, with its file.
    assert Volume.get_info(vol.volume_id).name == volume_name
    again = sandboxes.create(metadata={"run": RUN, "case": "volume-again"}, volume_mounts={"/data": volume_name})
    assert again.files.read("/data/secret.txt").strip() == "secret"
    again.kill()


def test_volume_token_opens_nothing(sandboxes, volume_name):
    vol = Volume.create(volume_name)
    sbx = sandboxes.create(metadata={"run": RUN, "case": "volume-token"}, volume_mounts={"/mnt/data": vol})
    with httpx.Client() as client:
        as_key = client.get(f"{API_URL}/volumes", headers={"X-API-Key": vol.token})
        assert as_key.status_code == 401, as_key.text
        as_envd = client.get(
            f"{SANDBOX_URL}/files",
            params={"path": "/etc/hostname"},
            headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": vol.token},
        )
        assert as_envd.status_code in (401, 403), as_envd.text
    sbx.kill()


def test_create_refuses_what_it_cannot_honour():
    for path in ("/etc", "/usr/lib/x", "/home/user", "/mnt/../proc", "relative"):
        with pytest.raises(Exception) as refused:
            Sandbox.create(volume_mounts={path: "data"}, request_timeout=REQUEST)
        assert "volumeMounts" in str(refused.value), (path, refused.value)
    with pytest.raises(Exception) as refused:
        Sandbox.create(lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}}, request_timeout=REQUEST)
    assert "autoPauseMemory" in str(refused.value)
