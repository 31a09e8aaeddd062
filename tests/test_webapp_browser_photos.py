"""A photo or a file sent from the web app, in real Chromium against `hermit gateway run` (its uvicorn, its
WebSocket) and the fake provider as an image-reading model: on a phone, 📎 is a tap target of its own, a chosen
photo (Playwright's set_input_files, as the camera or the photo picker hands it over) is previewed and removable,
and goes with the message in pieces — a photo larger than the server's 1 MiB frame limit; the provider receives
the image; after a reload the photo is still drawn in its bubble, under the page's CSP (data: images only). A file
too big is said at once and not taken; a send that fails (the gateway down) keeps the text and the photo to send
again; a camera's photo over what a model is shown goes as a smaller JPEG copy, said in the preview. On a desktop, 📎 works from the keyboard and a non-image file goes as a file, not as an image.

The module's gateway and fake provider listen on ports the system gives.
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, T, browser_fixture, open_page  # noqa: F401 - browser_fixture: the `browser` fixture
from gatewayhelpers import GatewayProcess, free_port
from hermit.gateway.attachments import MAX_IMAGE_BYTES
from hermit.gateway.protocol import UPLOAD_CHUNK_BYTES
from hermit.testing import FakeProvider
from webapphelpers import GROUP_KEY, build_demo_home

# Matched against the whole request, the history included: the word of a later test first.
STEPS: list[dict[str, Any]] = [
    {"match": {"contains": "notes-please"}, "repeat": True, "text": "Read your notes."},
    {"match": {"contains": "camera-please"}, "repeat": True, "text": "A big photo, seen."},
    {"match": {"contains": "kept-photo"}, "repeat": True, "text": "Got the kept photo."},
    {"match": {"contains": "receipt-please"}, "repeat": True, "text": "A receipt: coffee 3.50."},
]


def png(width: int, height: int, seed: int) -> bytes:
    """A real PNG of noise (it does not compress: width*height*3 bytes and a little more)."""
    rnd = random.Random(seed)
    raw = b"".join(b"\x00" + rnd.randbytes(width * 3) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


RECEIPT = png(600, 600, 7)  # ~1.1 MB: more than one WebSocket frame may carry (uvicorn's ws_max_size, 1 MiB)
RECEIPT_B64 = base64.b64encode(RECEIPT).decode()




@dataclass
class Served:
    home: Path
    fake: FakeProvider
    gw: GatewayProcess
    port: int

    @property
    def url(self) -> str:
        return self.gw.url

    def restart(self) -> None:
        self.gw = GatewayProcess(self.home, "--port", str(self.port))
        self.gw.wait_ready()

    def user_images(self) -> list[list[str]]:
        """The image data URLs of each user message in the provider's last request."""
        out = []
        for m in self.fake.requests[-1].body["messages"]:
            if m["role"] == "user":
                parts = m["content"] if isinstance(m["content"], list) else []
                out.append([p["image_url"]["url"] for p in parts if p.get("type") == "image_url"])
        return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("photos") / "home"
    with FakeProvider(STEPS) as fake:
        build_demo_home(home, fake.openai_base_url)
        config = (home / "hermit.yaml").read_text(encoding="utf-8")
        models = '", max_retries: 0, models: [{id: test-model, input: [text, image]}]}'
        (home / "hermit.yaml").write_text(config.replace('", max_retries: 0}', models), encoding="utf-8")
        assert "input: [text, image]" in (home / "hermit.yaml").read_text(encoding="utf-8")
        p = free_port()
        gw = GatewayProcess(home, "--port", str(p))
        gw.wait_ready()
        s = Served(home, fake, gw, p)
        try:
            yield s
        finally:
            s.gw.stop()


def files(name: str, mime: str, data: bytes) -> list[dict[str, Any]]:
    return [{"name": name, "mimeType": mime, "buffer": data}]


def test_a_photo_from_a_phone_is_previewed_sent_seen_by_the_model_and_still_there_after_a_reload(
        browser: Any, served: Served) -> None:
    opened = open_page(browser, served.url, *PHONE_SIZE, console_errors=True, frames=True)
    page = opened.page
    box = page.locator("#attach").bounding_box()
    assert box["width"] >= 40 and box["height"] >= 40, box  # a thumb's tap target
    assert page.get_attribute("#attach-input", "accept").startswith("image/*")

    # Picked, previewed, removed, picked again.
    page.set_input_files("#attach-input", files("IMG_0042.png", "image/png", RECEIPT))
    page.wait_for_selector("#attachments .attachment.image img", timeout=T)
    assert "IMG_0042.png" in page.inner_text("#attachments")
    remove = page.locator(".attachment-remove")
    assert remove.get_attribute("aria-label") == "Remove IMG_0042.png"
    rbox = remove.bounding_box()
    assert rbox["width"] >= 40 and rbox["height"] >= 40, rbox
    remove.tap()
    page.wait_for_selector("#attachments", state="hidden", timeout=T)
    page.set_input_files("#attach-input", files("IMG_0042.png", "image/png", RECEIPT))
    page.wait_for_selector("#attachments .attachment.image img", timeout=T)

    page.fill("#input", "what is on this? receipt-please")
    page.screenshot(path=str(served.home / "phone-preview.png"))
    page.tap("#send")
    reply = page.locator(".msg.user:has-text('receipt-please') + .msg.assistant[data-done='done']")
    reply.wait_for(timeout=T)
    assert "coffee 3.50" in reply.inner_text()
    assert page.is_hidden("#attachments") and page.input_value("#input") == ""
    assert page.locator(".msg.user:has-text('receipt-please') .pics img").count() == 1
    # The model read the photo: the bytes chosen, typed by their content.
    assert served.user_images()[-1] == ["data:image/png;base64," + RECEIPT_B64]
    # Sent in pieces, each under the frame limit, one after the other; and the look at the history after the
    # turn (nothing new to draw) brought no image back.
    pieces = [f["payload"] for f in opened.frames if f.get("ok") and "uploadId" in (f.get("payload") or {})]
    assert len(pieces) == -(-len(RECEIPT) // UPLOAD_CHUNK_BYTES) >= 8
    assert [p["size"] for p in pieces] == [min(len(RECEIPT), (i + 1) * UPLOAD_CHUNK_BYTES) for i in range(len(pieces))]
    assert pieces[-1]["done"] and not any(RECEIPT_B64[:1000] in json.dumps(f) for f in opened.frames)

    page.reload()
    page.wait_for_selector("#status.ok", timeout=T)
    img = page.locator(".msg.user:has-text('receipt-please') .pics img")
    img.wait_for(timeout=T)
    assert img.evaluate("(i) => i.complete && i.naturalWidth") == 600  # drawn, under the CSP
    assert img.get_attribute("src") == "data:image/png;base64," + RECEIPT_B64
    shown = page.locator(".msg.user:has-text('receipt-please')")
    assert "file received with this message: inbox/webchat-" in shown.locator(".file-line").inner_text()
    assert img.bounding_box()["width"] <= PHONE_SIZE[0] * 0.6 + 1  # a thumbnail, not the 600 px photo
    page.screenshot(path=str(served.home / "phone-photo.png"))
    assert opened.errors == []  # no CSP refusal, no script error
    opened.context.close()


def test_a_file_too_big_is_said_and_a_failed_send_keeps_the_text_and_the_photo(browser: Any, served: Served) -> None:
    opened = open_page(browser, served.url, *PHONE_SIZE)
    page = opened.page
    page.set_input_files("#attach-input", files("huge.jpg", "image/jpeg", b"\xff\xd8\xff" + b"\0" * (11 * 2**20)))
    page.wait_for_selector("#attach-note", state="visible", timeout=T)
    note = page.inner_text("#attach-note")
    assert "huge.jpg is 11 MB" in note and "at most 10 MB" in note, note
    assert page.is_hidden("#attachments")

    page.set_input_files("#attach-input", files("kept.png", "image/png", png(40, 30, 1)))
    page.wait_for_selector("#attachments .attachment.image img", timeout=T)
    assert page.is_hidden("#attach-note")  # the next choice clears the old complaint
    served.gw.stop()
    page.wait_for_selector("#status:not(.ok)", timeout=T)
    page.fill("#input", "here it is kept-photo")
    page.tap("#send")
    page.wait_for_selector(".notice.unsent", timeout=T)
    assert page.input_value("#input") == "here it is kept-photo"
    assert page.locator("#attachments .attachment").count() == 1
    served.restart()
    page.wait_for_selector("#status.ok", timeout=60_000)
    page.tap("#send")
    reply = page.locator(".msg.user:has-text('kept-photo') + .msg.assistant[data-done='done']")
    reply.wait_for(timeout=T)
    assert "kept photo" in reply.inner_text()
    assert served.user_images()[-1] == ["data:image/png;base64," + base64.b64encode(png(40, 30, 1)).decode()]
    assert page.is_hidden("#attachments") and opened.errors == []
    opened.context.close()


def test_a_camera_photo_over_what_a_model_sees_goes_as_a_smaller_jpeg_copy(browser: Any, served: Served) -> None:
    """A phone's camera photo is larger than the 3.75 MiB a model is shown: the page sends a JPEG copy at most
    2048 px long, says so in the preview, and the model sees it."""
    camera = png(2400, 1000, 3)  # 7.2 MB
    assert len(camera) > MAX_IMAGE_BYTES
    opened = open_page(browser, served.url, *PHONE_SIZE, console_errors=True)
    page = opened.page
    page.set_input_files("#attach-input", files("PXL_2026.png", "image/png", camera))
    page.wait_for_selector("#attachments .attachment.image img", timeout=T)
    said = page.inner_text("#attachments")
    assert "PXL_2026.jpg" in said and "a smaller copy of 6.9 MB, so the assistant can see it" in said, said
    page.fill("#input", "camera-please")
    page.tap("#send")
    page.locator(".msg.user:has-text('camera-please') + .msg.assistant[data-done='done']").wait_for(timeout=T)
    [sent] = served.user_images()[-1]
    assert sent.startswith("data:image/jpeg;base64,/9j/")
    data = base64.b64decode(sent.split(",", 1)[1])
    assert len(data) <= MAX_IMAGE_BYTES
    [filed] = [p for p in (served.home / "workspace" / "inbox").iterdir() if p.name.endswith("-PXL_2026.jpg")]
    assert filed.read_bytes() == data
    page.reload()
    img = page.locator(".msg.user:has-text('camera-please') .pics img")
    img.wait_for(timeout=T)
    assert img.evaluate("(i) => [i.naturalWidth, i.naturalHeight]") == [2048, 853]
    assert opened.errors == []
    opened.context.close()


def test_on_a_desktop_the_keyboard_attaches_and_a_text_file_goes_as_a_file(browser: Any, served: Served) -> None:
    opened = open_page(browser, served.url, console_errors=True)
    page = opened.page
    page.wait_for_selector("#messages .msg, #messages .notice", timeout=T)  # the history is drawn
    # Reached with the keyboard (Shift+Tab from the box), Enter opens the file picker: the button clicks the
    # file input, as a browser opens its picker (headless Chromium shows its chooser to Playwright only now
    # and then, so the click is what is looked for).
    page.evaluate("""() => { window.opened = 0;
        document.getElementById("attach-input").addEventListener("click", () => { window.opened++; }); }""")
    page.focus("#input")
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.id") == "attach"
    page.keyboard.press("Enter")
    page.wait_for_function("window.opened === 1", timeout=T)
    assert page.get_attribute("#attach-input", "multiple") is not None
    page.set_input_files("#attach-input", files("notes.png", "image/png", b"shopping: eggs, milk\n"))  # its name lies
    page.wait_for_selector("#attachments .attachment", timeout=T)
    page.fill("#input", "notes-please")
    page.keyboard.press("Enter")
    reply = page.locator(".msg.user:has-text('notes-please') + .msg.assistant[data-done='done']")
    reply.wait_for(timeout=T)
    assert served.user_images()[-1] == []  # not an image by its bytes: filed and described, not shown
    said = served.fake.requests[-1].body["messages"][-1]["content"]
    said = said if isinstance(said, str) else "".join(p.get("text", "") for p in said)
    assert "-notes.png — document, 21 bytes)" in said, said
    assert served.home.joinpath("workspace", "inbox").exists()
    page.reload()
    page.wait_for_selector("#status.ok", timeout=T)
    mine = page.locator(".msg.user:has-text('notes-please')")
    mine.wait_for(timeout=T)
    assert mine.locator(".pics img").count() == 0 and "document" in mine.locator(".file-line").inner_text()

    # A file dropped on the chat, and an image pasted into the box, are attached as a picked one is.
    dropped = page.evaluate("""async (b64) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const moved = new DataTransfer();
        moved.items.add(new File([bytes], "dropped.png", { type: "image/png" }));
        document.getElementById("messages").dispatchEvent(new DragEvent("drop", { dataTransfer: moved, bubbles: true, cancelable: true }));
        const pasted = new DataTransfer();
        pasted.items.add(new File([bytes], "pasted.png", { type: "image/png" }));
        const paste = new ClipboardEvent("paste", { clipboardData: pasted, bubbles: true, cancelable: true });
        document.getElementById("input").dispatchEvent(paste);
        return paste.defaultPrevented;
    }""", base64.b64encode(png(20, 20, 5)).decode())
    assert dropped  # the pasted file is not pasted as text
    page.wait_for_selector("#attachments .attachment.image >> nth=1", timeout=T)
    assert [t.split(" ·")[0] for t in page.locator(".attachment-name").all_inner_texts()] == ["dropped.png", "pasted.png"]
    assert page.input_value("#input") == ""

    # A read-only session (a group's) takes no file: the button is off, a drop is not taken.
    page.evaluate("window.HermitChat.open({key: arguments[0], agentId: 'main'})".replace("arguments[0]", repr(GROUP_KEY)))
    page.wait_for_selector("body.read-only", timeout=T)
    assert page.is_disabled("#attach")
    assert not page.evaluate("""() => {
        const moved = new DataTransfer();
        moved.items.add(new File(["x"], "into-group.txt", { type: "text/plain" }));
        const drop = new DragEvent("drop", { dataTransfer: moved, bubbles: true, cancelable: true });
        document.getElementById("messages").dispatchEvent(drop);
        return drop.defaultPrevented;
    }""")
    assert "into-group.txt" not in page.inner_text("#view-chat")
    assert opened.errors == []
    opened.context.close()
