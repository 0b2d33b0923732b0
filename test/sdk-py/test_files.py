"""Files: write and read (text, bytes, ranges, streams), info, list, search, move,
replace, permissions, directories and delete."""

import io

import pytest

from conftest import RUN
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.filesystem import (
    ContentReplaceEntry,
    DirectoryListEntry,
    MoveEntry,
    SearchEntry,
    SetPermissionEntry,
    WriteEntry,
)


@pytest.fixture(scope="module")
def sbx(sandboxes):
    return sandboxes.create(metadata={"run": RUN, "role": "files"})


def test_write_then_read_text(sbx):
    sbx.files.write_file("/tmp/sdk/hello.txt", "héllo\nworld\n")
    assert sbx.files.read_file("/tmp/sdk/hello.txt") == "héllo\nworld\n"
    assert sbx.commands.run("cat /tmp/sdk/hello.txt").text == "héllo\nworld"


def test_upload_many_and_download_bytes(sbx):
    blob = bytes(range(256)) * 1024
    sbx.files.write_files([
        WriteEntry(path="/tmp/sdk/up/blob.bin", data=blob),
        WriteEntry(path="/tmp/sdk/up/stream.bin", data=io.BytesIO(b"from a stream")),
        WriteEntry(path="/tmp/sdk/up/deep/er/x.txt", data="x", mode=600),
    ])
    assert sbx.files.read_bytes("/tmp/sdk/up/blob.bin") == blob
    assert b"".join(sbx.files.read_bytes_stream("/tmp/sdk/up/blob.bin", chunk_size=4096)) == blob
    assert sbx.files.read_bytes("/tmp/sdk/up/stream.bin") == b"from a stream"
    assert sbx.files.read_bytes("/tmp/sdk/up/blob.bin", range_header="bytes=256-511") == bytes(range(256))
    info = sbx.files.get_file_info(["/tmp/sdk/up/deep/er/x.txt"])["/tmp/sdk/up/deep/er/x.txt"]
    assert info.mode == 600
    assert info.size == 1


def test_read_lines_with_offset_and_limit(sbx):
    sbx.files.write_file("/tmp/sdk/lines.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    assert sbx.files.read_file("/tmp/sdk/lines.txt", offset=3, limit=2) == "line 3\nline 4\n"


def test_file_info_list_and_search(sbx):
    sbx.files.write_file("/tmp/sdk/tree/a.py", "a")
    sbx.files.write_file("/tmp/sdk/tree/sub/b.py", "bb")
    sbx.files.write_file("/tmp/sdk/tree/sub/c.txt", "ccc")
    infos = sbx.files.get_file_info(["/tmp/sdk/tree/a.py", "/tmp/sdk/tree/sub"])
    assert infos["/tmp/sdk/tree/a.py"].entry_type == "file" and infos["/tmp/sdk/tree/a.py"].size == 1
    assert infos["/tmp/sdk/tree/sub"].entry_type == "directory"
    top = sbx.files.list_directory(DirectoryListEntry(path="/tmp/sdk/tree", depth=1))
    assert {e.path for e in top} == {"/tmp/sdk/tree/a.py", "/tmp/sdk/tree/sub"}
    found = sbx.files.search(SearchEntry(path="/tmp/sdk/tree", pattern="**/*.py"))
    assert {e.path for e in found} == {"/tmp/sdk/tree/a.py", "/tmp/sdk/tree/sub/b.py"}


def test_move_replace_and_permissions(sbx):
    sbx.files.write_file("/tmp/sdk/mv/src.txt", "alpha beta alpha")
    sbx.files.move_files([MoveEntry(src="/tmp/sdk/mv/src.txt", dest="/tmp/sdk/mv/dst.txt")])
    with pytest.raises(SandboxApiException):
        sbx.files.read_file("/tmp/sdk/mv/src.txt")
    results = sbx.files.replace_contents_detailed([
        ContentReplaceEntry(path="/tmp/sdk/mv/dst.txt", old_content="alpha", new_content="gamma"),
    ])
    assert [(r.path, r.replaced_count) for r in results] == [("/tmp/sdk/mv/dst.txt", 2)]
    sbx.files.replace_contents([ContentReplaceEntry(path="/tmp/sdk/mv/dst.txt", old_content="beta", new_content="delta")])
    assert sbx.files.read_file("/tmp/sdk/mv/dst.txt") == "gamma delta gamma"
    sbx.files.set_permissions([SetPermissionEntry(path="/tmp/sdk/mv/dst.txt", mode=640)])
    assert sbx.files.get_file_info(["/tmp/sdk/mv/dst.txt"])["/tmp/sdk/mv/dst.txt"].mode == 640


def test_delete_files_and_directories(sbx):
    sbx.files.create_directories([WriteEntry(path="/tmp/sdk/dirs/a/b", mode=755)])
    assert sbx.files.get_file_info(["/tmp/sdk/dirs/a/b"])["/tmp/sdk/dirs/a/b"].entry_type == "directory"
    sbx.files.write_file("/tmp/sdk/dirs/a/b/f.txt", "f")
    sbx.files.delete_files(["/tmp/sdk/dirs/a/b/f.txt"])
    with pytest.raises(SandboxApiException) as err:
        sbx.files.read_file("/tmp/sdk/dirs/a/b/f.txt")
    assert err.value.status_code == 404
    sbx.files.delete_directories(["/tmp/sdk/dirs"])
    assert sbx.commands.run("test -e /tmp/sdk/dirs && echo there || echo gone").text == "gone"


def test_files_with_identity_write_as_that_user(sbx):
    sbx.commands.run("mkdir -p /tmp/sdk/ident && chmod 777 /tmp/sdk/ident")
    as_user = sbx.files_with_identity(1234, 2345)
    as_user.write_file("/tmp/sdk/ident/mine.txt", "owned")
    assert sbx.commands.run("stat -c '%u:%g' /tmp/sdk/ident/mine.txt").text == "1234:2345"
    assert as_user.read_file("/tmp/sdk/ident/mine.txt") == "owned"
