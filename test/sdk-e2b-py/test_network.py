"""A sandbox's network through the E2B door: allow_internet_access and allow_out /
deny_out at create and through update_network become its egress policy, judged by the
gateway's Rego egress policy and installed in its enforcer; get_info reports whether
the policy in force lets it reach the internet. Another tenant changes nothing."""

import pytest

from conftest import OTHER_KEY, RUN
from e2b import ALL_TRAFFIC, Sandbox, SandboxNotFoundException


def test_internet_access_and_update(sandboxes):
    sbx = sandboxes.create(metadata={"run": RUN, "case": "network"}, allow_internet_access=False, timeout=600)
    assert sbx.get_info().allow_internet_access is False

    sbx.update_network({"deny_out": ["10.0.0.0/8"]})
    assert sbx.get_info().allow_internet_access is True

    sbx.update_network({"allow_out": ["1.1.1.1"], "deny_out": [ALL_TRAFFIC]})
    assert sbx.get_info().allow_internet_access is False

    with pytest.raises(SandboxNotFoundException):
        Sandbox.update_network(sbx.sandbox_id, {}, api_key=OTHER_KEY)
    assert sbx.get_info().allow_internet_access is False


def test_allow_out_at_create(sandboxes):
    sbx = sandboxes.create(
        metadata={"run": RUN, "case": "network-create"},
        network={"allow_out": ["pypi.org"], "deny_out": [ALL_TRAFFIC]},
    )
    assert sbx.get_info().allow_internet_access is False
