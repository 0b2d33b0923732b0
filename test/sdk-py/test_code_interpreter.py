"""Code contexts through opensandbox-code-interpreter on sandgate's code interpreter
image: contexts, stateful Python runs, results, output and errors."""

import os
from datetime import timedelta

import pytest

from code_interpreter import CodeInterpreterSync, SupportedLanguage
from conftest import RUN

CODE_IMAGE = os.environ["SANDGATE_SDK_CODE_IMAGE"]


@pytest.fixture(scope="module")
def sbx(sandboxes):
    return sandboxes.create(CODE_IMAGE, metadata={"run": RUN, "role": "code"})


@pytest.fixture(scope="module")
def interpreter(sbx):
    ci = CodeInterpreterSync.create(sbx, skip_health_check=True)
    yield ci
    ci.close()


def test_create_with_the_default_health_check(sbx):
    ci = CodeInterpreterSync.create(sbx, ready_timeout=timedelta(seconds=20))
    ci.close()


def test_context_keeps_state_and_answers_results(interpreter):
    ctx = interpreter.codes.create_context(SupportedLanguage.PYTHON)
    assert ctx.id and ctx.language == "python"
    first = interpreter.codes.run("x = 21\nprint('set', x)", context=ctx)
    assert first.error is None
    assert [m.text.strip() for m in first.logs.stdout] == ["set 21"]
    second = interpreter.codes.run("x * 2", context=ctx)
    assert [r.text for r in second.result] == ["42"]
    assert second.execution_count is not None and second.execution_count > (first.execution_count or 0)


def test_errors_carry_name_and_value(interpreter):
    ex = interpreter.codes.run("1/0", language=SupportedLanguage.PYTHON)
    assert ex.error is not None
    assert ex.error.name == "ZeroDivisionError"
    assert "division by zero" in ex.error.value
    assert ex.error.traceback


def test_stderr_and_default_context(interpreter):
    ex = interpreter.codes.run("import sys\nsys.stderr.write('to stderr\\n')\nprint('to stdout')", language=SupportedLanguage.PYTHON)
    assert "to stderr" in "".join(m.text for m in ex.logs.stderr)
    assert "to stdout" in "".join(m.text for m in ex.logs.stdout)
    again = interpreter.codes.run("y = 5", language=SupportedLanguage.PYTHON)
    assert interpreter.codes.run("y + 1", language=SupportedLanguage.PYTHON).result[0].text == "6"
    assert again.error is None


def test_list_get_and_delete_contexts(interpreter):
    ctx = interpreter.codes.create_context(SupportedLanguage.PYTHON)
    listed = interpreter.codes.list_contexts(SupportedLanguage.PYTHON)
    assert ctx.id in {c.id for c in listed}
    assert interpreter.codes.get_context(ctx.id).id == ctx.id
    interpreter.codes.delete_context(ctx.id)
    assert ctx.id not in {c.id for c in interpreter.codes.list_contexts(SupportedLanguage.PYTHON)}


def test_bash_context(interpreter):
    ctx = interpreter.codes.create_context(SupportedLanguage.BASH)
    interpreter.codes.run("GREET=bash-ctx", context=ctx)
    ex = interpreter.codes.run("echo $GREET", context=ctx)
    assert "bash-ctx" in ex.text
