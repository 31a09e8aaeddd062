"""Memory files the index leaves out, in the web app's Browse list in real Chromium (Playwright) against `hermit
gateway run` with the scripted model, at a phone's size and a desktop's: a binary note and one over
`memory_search.max_file_bytes` are listed muted, with a "not indexed" label and the reason where the date
would be (and in their accessible name); opening one says why it is not indexed (and, for the binary one, why it
cannot be shown), while an indexed file's row and note say nothing of the kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import DESKTOP_SIZE, PHONE_SIZE, Demo, T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from webapphelpers import build_demo_home

SIZES = [PHONE_SIZE, DESKTOP_SIZE]
LIMIT = 4096
BIG = "memory/2026-11-10.md"
BLOB = "memory/blob.md"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    def prepare(home: Path, base_url: str) -> None:
        build_demo_home(home, base_url)
        config = home / "hermit.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace(
            "memory_search: {provider: none}", f"memory_search: {{provider: none, max_file_bytes: {LIMIT}}}"),
            encoding="utf-8")
        memory = home / "workspace" / "memory"
        (memory / "blob.md").write_bytes(b"# not text\x00\x01\x02\n")
        (memory / "2026-11-10.md").write_text("# 2026-11-10\n\n" + "- a long day of notes, line after line\n" * 200,
                                              encoding="utf-8")

    with served_demo(tmp_path_factory.mktemp("memory") / "home", [], prepare) as served:
        yield served


def row(page: Any, path: str) -> Any:
    return page.locator(f"#memory-files li[data-path='{path}']")


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_files_the_index_left_out_are_marked_and_say_why(browser: Any, demo: Demo, width: int, height: int) -> None:
    narrow = width < 700
    opened = open_page(browser, demo.url, width, height)
    page = opened.page
    # What the index left out is known once its first sync (run as the gateway starts) is done: before that the
    # list has the files unmarked. Waited for through the gateway, not assumed done by the time the view opens.
    page.wait_for_function("() => window.Hermit.request('memory.status', {agentId: 'main'}).then((s) => !s.dirty)",
                           polling=200, timeout=T)
    if narrow:
        page.click("#menu")
    page.click(".tab[data-view='memory']")
    row(page, "MEMORY.md").wait_for(timeout=T)
    for path, reason in ((BLOB, "looks binary"), (BIG, "too large")):
        r = row(page, path)
        r.wait_for(timeout=T)
        assert "skipped" in (r.get_attribute("class") or "")
        assert r.locator(".badge.skip").inner_text() == "not indexed"
        assert reason in r.locator(".f-meta").inner_text()
        assert r.get_attribute("aria-label").endswith("not indexed: " + r.locator(".f-meta").inner_text().split(" · ", 1)[1])
        assert reason in r.get_attribute("title")
    looks = page.evaluate("""(paths) => paths.map((p) => {
        const li = document.querySelector(`#memory-files li[data-path='${p}']`), name = li.querySelector('.f-name');
        const s = getComputedStyle(li), n = getComputedStyle(name);
        return [s.color, n.fontStyle, s.borderLeftStyle]; })""", [BIG, "MEMORY.md"])
    assert looks[0] != looks[1] and looks[0][1:] == ["italic", "dashed"]  # muted, set apart
    indexed = row(page, "MEMORY.md")
    assert indexed.locator(".badge.skip").count() == 0 and indexed.get_attribute("aria-label") is None
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    row(page, BIG).scroll_into_view_if_needed()
    page.screenshot(path=f"/tmp/webC/not-indexed-{width}.png")

    row(page, BIG).click()  # too large: shown, and said why search does not find it
    note = page.locator("#memory-file-note")
    page.wait_for_selector("#memory-lines .line", timeout=T)
    assert note.inner_text().startswith("Not indexed — too large") and "search does not find it" in note.inner_text()
    assert "max_file_bytes" in note.inner_text() and "warn" in (note.get_attribute("class") or "")
    if narrow:
        page.click("#memory-back")
    row(page, BLOB).click()  # binary: not shown, and said why
    # A function, not a bare expression: Playwright evals an expression in the page at each poll after the first,
    # which the page's CSP (no 'unsafe-eval') refuses — the wait failed whenever the note was not there at once.
    page.wait_for_function("() => document.querySelector('#memory-file-note').textContent.includes('cannot be shown')",
                           timeout=T)
    assert note.inner_text().startswith("Not indexed — looks binary") and "bad" in (note.get_attribute("class") or "")
    if narrow:
        page.click("#memory-back")
    row(page, "MEMORY.md").click()
    page.wait_for_selector("#memory-edit", state="visible", timeout=T)
    assert "Not indexed" not in note.inner_text()
    assert opened.errors == []
    opened.context.close()
