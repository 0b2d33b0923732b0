"""Calls into a sandbox through the E2B door's header routing to envd (port 49983, the
agent under /envd): commands with output, exit codes and environment, files written and
read back, a paused sandbox with autoResume resumed by a command. Only what shows the
routing and its tokens; envd's own behaviour is the agent's to test."""

import time

import pytest

from conftest import RUN
from e2b import CommandExitException, SandboxState


@pytest.fixture(scope="module")
def sbx(sandboxes):
    return sandboxes.create(metadata={"run": RUN, "case": "envd"}, envs={"GREETING": "hi"}, timeout=600)


def test_health(sbx):
    assert sbx.is_running() is True


def test_command(sbx):
    result = sbx.commands.run("echo $GREETING from $(whoami)")
    assert result.exit_code == 0
    assert result.stdout.strip() == "hi from user"
    with pytest.raises(CommandExitException):
        sbx.commands.run("exit 3")


def test_files(sbx):
    sbx.files.write("/home/user/door.txt", f"through the door {RUN}")
    assert sbx.files.read("/home/user/door.txt") == f"through the door {RUN}"
    assert "door.txt" in [e.name for e in sbx.files.list("/home/user")]


def test_auto_resume(sandboxes):
    sbx = sandboxes.create(
        metadata={"run": RUN, "case": "auto-resume"}, timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True}
    )
    assert sbx.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": True}
    deadline = time.monotonic() + 30
    while sbx.get_info().state != SandboxState.PAUSED:
        assert time.monotonic() < deadline, "the sandbox was not paused at its timeout"
        time.sleep(0.5)
    # A command into the paused sandbox resumes it.
    assert sbx.commands.run("echo back").stdout.strip() == "back"
    assert sbx.get_info().state == SandboxState.RUNNING
