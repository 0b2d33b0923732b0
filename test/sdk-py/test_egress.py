"""Egress: a deny-all networkPolicy with one allowed name, enforced inside the sandbox,
then read, patched and narrowed again through the SDK. Both servers are containers the
Go test started on the sandbox network; nothing outside is ever addressed."""

import os

import pytest

from conftest import RUN
from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule

ALLOWED = os.environ["SANDGATE_SDK_EGRESS_ALLOWED"]
DENIED = os.environ["SANDGATE_SDK_EGRESS_DENIED"]


def http_status(sbx, host: str) -> str:
    """The status of GET http://host:8000/ from inside the sandbox, 000 when no
    connection was made."""
    ex = sbx.commands.run(f"curl -s -o /dev/null -w '%{{http_code}}' --connect-timeout 3 --max-time 6 http://{host}:8000/ || true")
    return ex.text.strip()


@pytest.fixture(scope="module")
def sbx(sandboxes):
    policy = NetworkPolicy(default_action="deny", egress=[NetworkRule(action="allow", target=ALLOWED)])
    return sandboxes.create(metadata={"run": RUN, "role": "egress"}, network_policy=policy)


def test_only_the_allowed_name_is_reachable(sbx):
    assert http_status(sbx, ALLOWED) == "200"
    assert http_status(sbx, DENIED) == "000"


def test_policy_reads_back(sbx):
    policy = sbx.get_egress_policy()
    assert policy.default_action == "deny"
    assert [(r.action, r.target) for r in policy.egress] == [("allow", ALLOWED)]


def test_patch_allows_then_delete_denies_again(sbx):
    sbx.patch_egress_rules([NetworkRule(action="allow", target=DENIED)])
    assert {r.target for r in sbx.get_egress_policy().egress} == {ALLOWED, DENIED}
    assert http_status(sbx, DENIED) == "200"
    sbx.delete_egress_rules([DENIED])
    assert [r.target for r in sbx.get_egress_policy().egress] == [ALLOWED]
    assert http_status(sbx, DENIED) == "000"
    assert http_status(sbx, ALLOWED) == "200"


def test_a_deny_rule_ahead_of_the_allow_wins(sbx):
    sbx.patch_egress_rules([NetworkRule(action="deny", target=ALLOWED)])
    try:
        assert http_status(sbx, ALLOWED) == "000"
    finally:
        sbx.patch_egress_rules([NetworkRule(action="allow", target=ALLOWED)])
    assert http_status(sbx, ALLOWED) == "200"
