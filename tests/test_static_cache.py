"""The web app's files on a reload (H9): they went out `Cache-Control: no-store`, so every reload on a slow phone
downloaded all the scripts and styles again. They now go out `no-cache` with an ETag of their content, and a
reload's revalidation gets 304 without a body; the page itself (/ and /static/index.html, opened by a URL that
carries the token) stays `no-store`. Against a real `hermit gateway run` on a port the system gives."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from browserdemo import T, open_page
from gatewayhelpers import GatewayProcess, launched_chromium, unused_model_gateway
from hermit.gateway.app import STATIC_DIR


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from unused_model_gateway(tmp_path_factory.mktemp("static"))  # no message is sent


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_chromium()


def base(gw: GatewayProcess) -> str:
    return gw.url.split("/?", 1)[0]


@pytest.mark.parametrize("name", ["app.js", "style.css", "chat.js", "favicon.svg"])
def test_a_static_file_is_revalidated_and_a_reload_gets_304_without_a_body(gateway: GatewayProcess,
                                                                           name: str) -> None:
    with httpx.Client(base_url=base(gateway), timeout=10) as http:
        first = http.get(f"/static/{name}")
        assert first.status_code == 200 and first.content == (STATIC_DIR / name).read_bytes()
        assert first.headers["cache-control"] == "no-cache", first.headers
        etag = first.headers["etag"]
        assert etag == '"' + hashlib.sha256(first.content).hexdigest()[:32] + '"'  # strong: of its bytes
        again = http.get(f"/static/{name}", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"", again.headers
        assert again.headers["etag"] == etag and again.headers["cache-control"] == "no-cache"
        assert "frame-ancestors 'none'" in again.headers["content-security-policy"]
        other = http.get(f"/static/{name}", headers={"If-None-Match": '"something-else"'})
        assert other.status_code == 200 and other.content == first.content


def test_the_page_that_the_token_url_opens_is_never_stored(gateway: GatewayProcess) -> None:
    with httpx.Client(timeout=10) as http:
        page = http.get(gateway.url)  # /?token=…
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
        app = http.get(base(gateway) + "/static/index.html")
        assert app.status_code == 200 and app.headers["cache-control"] == "no-store"


def test_a_reload_in_chromium_revalidates_the_scripts_and_styles(gateway: GatewayProcess, browser: Any) -> None:
    opened = open_page(browser, gateway.url)  # signed in: the page says it is connected
    seen: dict[str, int] = {}
    opened.page.on("response", lambda r: seen.setdefault(r.url.rsplit("/", 1)[1], r.status)
                   if "/static/" in r.url else None)
    opened.page.reload()
    opened.page.wait_for_selector("#status.ok", timeout=T)
    scripts = {name: status for name, status in seen.items() if name.endswith((".js", ".css"))}
    assert "app.js" in scripts and "style.css" in scripts, seen
    assert set(scripts.values()) == {304}, seen  # asked about, not downloaded again
    assert not opened.errors
    opened.context.close()
