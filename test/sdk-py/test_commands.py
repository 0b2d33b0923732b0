"""Commands: foreground runs with their output, exit code and handlers; options
(working directory, environment, timeout); background commands with status, logs and
interrupt; bash sessions."""

import time
from datetime import timedelta

import pytest

from conftest import RUN
from opensandbox.models.execd import RunCommandOpts
from opensandbox.models.execd_sync import ExecutionHandlersSync


@pytest.fixture(scope="module")
def sbx(sandboxes):
    return sandboxes.create(metadata={"run": RUN, "role": "commands"})


def test_stdout_stderr_and_exit_code(sbx):
    ex = sbx.commands.run("echo one; echo two; echo oops >&2; exit 3")
    assert [m.text for m in ex.logs.stdout] == ["one", "two"]
    assert [m.text for m in ex.logs.stderr] == ["oops"]
    assert ex.exit_code == 3
    assert ex.error is not None and ex.error.value == "3"
    assert ex.id


def test_success_has_exit_code_zero_and_completes(sbx):
    ex = sbx.commands.run("true")
    assert ex.exit_code == 0
    assert ex.error is None
    assert ex.complete is not None


def test_handlers_see_every_event(sbx):
    seen = {"init": 0, "stdout": [], "stderr": [], "complete": 0}
    handlers = ExecutionHandlersSync(
        on_init=lambda m: seen.__setitem__("init", seen["init"] + 1),
        on_stdout=lambda m: seen["stdout"].append(m.text),
        on_stderr=lambda m: seen["stderr"].append(m.text),
        on_execution_complete=lambda m: seen.__setitem__("complete", seen["complete"] + 1),
    )
    sbx.commands.run("for i in 1 2 3; do echo line$i; done; echo e >&2", handlers=handlers)
    assert seen == {"init": 1, "stdout": ["line1", "line2", "line3"], "stderr": ["e"], "complete": 1}


def test_working_directory_and_environment(sbx):
    ex = sbx.commands.run("pwd; echo $SDK_VAR", opts=RunCommandOpts(working_directory="/tmp", envs={"SDK_VAR": "from-opts"}))
    assert ex.text == "/tmp\nfrom-opts"


def test_argv_runs_without_a_shell(sbx):
    argv = sbx.commands.run(["printf", "%s|", "a b", "c"])
    assert argv.text == "a b|c|"


def test_timeout_ends_a_long_command(sbx):
    started = time.monotonic()
    ex = sbx.commands.run("sleep 30; echo never", opts=RunCommandOpts(timeout=timedelta(seconds=2)))
    assert time.monotonic() - started < 20
    assert "never" not in ex.text
    assert ex.exit_code != 0


def test_background_command_status_and_logs(sbx):
    ex = sbx.commands.run("echo started; sleep 1; echo finished; exit 4", opts=RunCommandOpts(background=True))
    assert ex.id
    deadline = time.monotonic() + 30
    status = sbx.commands.get_command_status(ex.id)
    while status.running and time.monotonic() < deadline:
        time.sleep(0.3)
        status = sbx.commands.get_command_status(ex.id)
    assert status.running is False
    assert status.exit_code == 4
    assert status.started_at is not None and status.finished_at is not None
    logs = sbx.commands.get_background_command_logs(ex.id)
    assert logs.content.splitlines() == ["started", "finished"]
    assert logs.cursor is not None
    rest = sbx.commands.get_background_command_logs(ex.id, cursor=logs.cursor)
    assert rest.content == ""


def test_interrupt_stops_a_background_command(sbx):
    ex = sbx.commands.run("sleep 300", opts=RunCommandOpts(background=True))
    assert sbx.commands.get_command_status(ex.id).running is True
    sbx.commands.interrupt(ex.id)
    deadline = time.monotonic() + 20
    while sbx.commands.get_command_status(ex.id).running and time.monotonic() < deadline:
        time.sleep(0.3)
    assert sbx.commands.get_command_status(ex.id).running is False


def test_session_keeps_its_shell_state(sbx):
    sid = sbx.commands.create_session(working_directory="/tmp")
    try:
        sbx.commands.run_in_session(sid, "export SESSION_VAR=kept; mkdir -p sess && cd sess")
        ex = sbx.commands.run_in_session(sid, "echo $SESSION_VAR; pwd")
        assert ex.text == "kept\n/tmp/sess"
        failed = sbx.commands.run_in_session(sid, "false")
        assert failed.exit_code == 1
    finally:
        sbx.commands.delete_session(sid)


def test_set_env_reaches_later_commands(sbx):
    sbx.commands.set_env("SDK_SET_ENV", "persisted")
    assert sbx.commands.run("echo $SDK_SET_ENV").text == "persisted"


def test_uid_and_gid(sbx):
    ex = sbx.commands.run("id -u; id -g", opts=RunCommandOpts(uid=1234, gid=2345))
    assert ex.text == "1234\n2345"
