"""Credential vault: the SDK's credential_vault helpers on a sandbox created with
credential_proxy. The upstream is an HTTPS echo server the Go test started on the
sandbox network; it answers the SHA-256 of the Authorization and X-Api-Key headers it
received, so the real value never has to be printed inside the sandbox."""

import base64
import hashlib
import json
import os

import pytest

from conftest import RUN
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.sandboxes import (
    Credential,
    CredentialAuth,
    CredentialBinding,
    CredentialMatch,
    CredentialMutationSet,
    CredentialBindingMutationSet,
    CredentialProxyConfig,
    CustomHeaderEntry,
    InlineCredentialSource,
    NetworkPolicy,
    NetworkRule,
)

HOST = os.environ["SANDGATE_SDK_VAULT_HOST"]
SECRET = os.environ["SANDGATE_SDK_VAULT_SECRET"]


def sha256(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def curl(sbx, path: str, method: str = "GET") -> dict:
    ex = sbx.commands.run(
        f"curl -sS --max-time 20 -X {method} -H 'Authorization: Bearer fake' -H 'X-Api-Key: fake' https://{HOST}{path}"
    )
    assert ex.exit_code == 0, str(ex)
    return json.loads(ex.text)


@pytest.fixture(scope="module")
def sbx(sandboxes):
    return sandboxes.create(
        metadata={"run": RUN, "role": "vault"},
        network_policy=NetworkPolicy(default_action="deny", egress=[NetworkRule(action="allow", target=HOST)]),
        credential_proxy=CredentialProxyConfig(enabled=True),
    )


def test_create_injects_the_real_token_on_matching_https_requests(sbx):
    state = sbx.credential_vault.create(
        credentials=[Credential(name="echo-token", source=InlineCredentialSource(value=SECRET))],
        bindings=[CredentialBinding(
            name="echo",
            match=CredentialMatch(schemes=["https"], hosts=[HOST], paths=["/api/*"]),
            auth=CredentialAuth(type="bearer", credential="echo-token"),
        )],
    )
    assert state.revision == 1
    assert SECRET not in state.model_dump_json()
    assert [(c.name, c.source_type) for c in state.credentials] == [("echo-token", "inline")]
    assert curl(sbx, "/api/models")["auth"] == sha256(f"Bearer {SECRET}")
    assert curl(sbx, "/elsewhere")["auth"] == sha256("Bearer fake")


def test_patch_with_the_current_revision_applies_a_stale_one_is_refused(sbx):
    state = sbx.credential_vault.patch(
        expected_revision=1,
        credentials=CredentialMutationSet(add=[Credential(name="k2", source=InlineCredentialSource(value=SECRET + "-2"))]),
        bindings=CredentialBindingMutationSet(add=[CredentialBinding(
            name="keyed",
            match=CredentialMatch(hosts=[HOST], paths=["/keyed"]),
            auth=CredentialAuth(type="apiKey", name="X-Api-Key", credential="k2"),
        )]),
    )
    assert state.revision == 2
    assert curl(sbx, "/keyed")["apiKey"] == sha256(SECRET + "-2")
    with pytest.raises(SandboxApiException) as err:
        sbx.credential_vault.patch(expected_revision=1, credentials=CredentialMutationSet(delete=["k2"]))
    assert err.value.status_code == 409
    assert sbx.credential_vault.get().revision == 2


def test_getters_answer_sanitized_metadata(sbx):
    creds = sbx.credential_vault.list_credentials()
    assert sorted(c.name for c in creds) == ["echo-token", "k2"]
    assert sbx.credential_vault.get_credential("k2").revision == 2
    bindings = sbx.credential_vault.list_bindings()
    assert sorted(b.name for b in bindings) == ["echo", "keyed"]
    keyed = sbx.credential_vault.get_binding("keyed")
    assert (keyed.auth.type, keyed.auth.name) == ("apiKey", "X-Api-Key")
    assert keyed.match.paths == ["/keyed"]
    dumped = "".join(x.model_dump_json() for x in [*creds, *bindings, keyed])
    assert SECRET not in dumped


def test_basic_and_custom_header_bindings(sbx):
    rev = sbx.credential_vault.get().revision
    userpass = base64.b64encode(f"user:{SECRET}".encode()).decode()
    state = sbx.credential_vault.patch(
        expected_revision=rev,
        credentials=CredentialMutationSet(add=[Credential(name="basic", source=InlineCredentialSource(value=userpass))]),
        bindings=CredentialBindingMutationSet(add=[
            CredentialBinding(name="basic", match=CredentialMatch(hosts=[HOST], paths=["/basic"], methods=["POST"]),
                              auth=CredentialAuth(type="basic", credential="basic")),
            CredentialBinding(name="custom", match=CredentialMatch(hosts=[HOST], paths=["/custom/*"]),
                              auth=CredentialAuth(type="customHeaders", headers=[CustomHeaderEntry(name="X-Api-Key", credential="k2")])),
        ]),
    )
    assert state.revision == rev + 1
    assert curl(sbx, "/basic", method="POST")["auth"] == sha256(f"Basic {userpass}")
    assert curl(sbx, "/basic")["auth"] == sha256("Bearer fake")  # GET is not bound
    assert curl(sbx, "/custom/x")["apiKey"] == sha256(SECRET + "-2")


def test_a_plain_http_binding_is_refused_by_policy(sbx):
    # sandgate's default vault policy (policy/rego/vault.rego) injects over https only:
    # an http binding would hand the credential to anyone on the path.
    with pytest.raises(SandboxApiException) as err:
        sbx.credential_vault.patch(bindings=CredentialBindingMutationSet(add=[CredentialBinding(
            name="plain",
            match=CredentialMatch(schemes=["http"], hosts=[HOST], paths=["/plain/*"]),
            auth=CredentialAuth(type="bearer", credential="echo-token"),
        )]))
    assert err.value.status_code == 403
    assert "VAULT::SCHEME_NOT_ALLOWED" in f"{err.value} {err.value.response_body!r}"
    assert sbx.credential_vault.get().revision == 3


def test_delete_removes_the_vault(sbx):
    sbx.credential_vault.delete()
    with pytest.raises(SandboxApiException) as err:
        sbx.credential_vault.get()
    assert err.value.status_code == 404
