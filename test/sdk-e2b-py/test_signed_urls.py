"""E2B's host form, {port}-{sandboxID}.<domain>, and signed file URLs. The gateway's
preview domain is the domain the create answers, so get_host() and the URLs of
download_url() and upload_url() name a host that reaches the sandbox without any of
the door's headers. Each URL's path and query go to the gateway's own listener with
get_host()'s name in the Host header: the domain is a .test name that nothing
resolves, and no request leaves the loopback."""

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from conftest import RUN, SANDBOX_URL, must_env

DOMAIN = must_env("SANDGATE_SDK_E2B_DOMAIN")
ENVD_PORT = 49983

# No proxy from the environment: every request goes to the gateway on the loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def send(url: str, host: str, method: str = "GET", data: bytes | None = None, headers: dict | None = None):
    """Sends url's path and query to the gateway with Host: host; answers (status, body)."""
    parts = urllib.parse.urlsplit(url)
    target = SANDBOX_URL.rstrip("/") + parts.path + ("?" + parts.query if parts.query else "")
    req = urllib.request.Request(target, data=data, method=method, headers={"Host": host, **(headers or {})})
    try:
        with OPENER.open(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def multipart(name: str, content: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body with one `file` part, as upload_url() wants."""
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\n"
    ).encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


@pytest.fixture(scope="module")
def sbx(sandboxes):
    return sandboxes.create(metadata={"run": RUN, "case": "signed-urls"}, timeout=600)


@pytest.fixture(scope="module")
def other(sandboxes):
    return sandboxes.create(metadata={"run": RUN, "case": "signed-urls-other"}, timeout=600)


def test_host_is_the_preview_domain(sbx):
    assert sbx.sandbox_domain == DOMAIN
    assert sbx.get_host(ENVD_PORT) == f"{ENVD_PORT}-{sbx.sandbox_id}.{DOMAIN}"


def test_signed_upload_and_download(sbx):
    path = "/home/user/signed.txt"
    content = f"signed {RUN}".encode()
    body, content_type = multipart("signed.txt", content)
    status, answer = send(sbx.upload_url(path, use_signature_expiration=300), sbx.get_host(ENVD_PORT), "POST", body, {"Content-Type": content_type})
    assert status == 200, answer
    assert sbx.files.read(path) == content.decode()
    status, answer = send(sbx.download_url(path), sbx.get_host(ENVD_PORT))
    assert (status, answer) == (200, content)
    status, answer = send(sbx.download_url(path, use_signature_expiration=60), sbx.get_host(ENVD_PORT))
    assert (status, answer) == (200, content)


def test_signed_urls_refused(sbx, other):
    path = "/home/user/refused.txt"
    sbx.files.write(path, "kept")
    host = sbx.get_host(ENVD_PORT)
    status, answer = send(sbx.download_url(path, use_signature_expiration=-10), host)
    assert status == 401 and json.loads(answer)["message"] == "signature is already expired", answer
    # Another sandbox's host with this sandbox's signature, this sandbox's host with the
    # other's, a read signature for a write, and a URL without its signature.
    status, answer = send(sbx.download_url(path), other.get_host(ENVD_PORT))
    assert status == 403, answer
    status, answer = send(other.download_url(path), host)
    assert status == 403, answer
    body, content_type = multipart("refused.txt", b"overwritten")
    status, answer = send(sbx.download_url(path), host, "POST", body, {"Content-Type": content_type})
    assert status == 403, answer
    unsigned = sbx.download_url(path).split("&signature=")[0]
    status, answer = send(unsigned, host)
    assert status == 401, answer
    assert sbx.files.read(path) == "kept"


def test_host_routes_a_port(sbx):
    sbx.commands.run("python3 -m http.server 8000 --directory /home/user", background=True)
    host = sbx.get_host(8000)
    assert host == f"8000-{sbx.sandbox_id}.{DOMAIN}"
    headers = {"E2B-Traffic-Access-Token": sbx.traffic_access_token}
    deadline = time.monotonic() + 30
    while True:
        status, answer = send("/", host, headers=headers)
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200, answer
    status, answer = send("/", host)
    assert status == 401, answer
    status, answer = send("/", sbx.get_host(8000).replace(sbx.sandbox_id, str(uuid.uuid4())), headers=headers)
    assert status == 502, answer
