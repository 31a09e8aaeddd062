"""Re-audit of photos to the model: an image the provider would refuse for its pixels is never attached.

An attached image is sent again with every later request of its session (models/base.sendable_images), so one
that Anthropic refuses (over 8000 px a side) had every later turn of the session answered with a 400 until
/new — a few bytes of PNG, GIF, JPEG or WebP header declaring a huge picture (a decompression bomb) from any
group member stopped the group's assistant for everyone. The header's size is read without decoding anything
(attachments.image_size); the gateway runs as test_photos_to_model.py's (real Telegram channel against the fake
Bot API, the Bus, AgentRuntime with the real Anthropic adapter talking HTTP to the fake provider).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import pytest

from channelhelpers import run
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.gateway import attachments
from hermit.messages import ImagePart
from hermit.models import build_model
from hermit.testing import FakeProvider
from sessionhelpers import runtime, transcript_bytes
from test_photos_to_model import GROUP, GROUP_KEY, MEMBER, anthropic_images, gateway, text_of


def png(width: int, height: int) -> bytes:
    """A real PNG: its header declares `width` x `height`; its one IDAT holds a single row of that width, a
    few bytes compressed (a decoder would go on to expect `height` rows: what a bomb looks like)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = zlib.compress(b"\x00" + bytes(width), 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", row) + chunk(b"IEND", b""))


def jpeg(width: int, height: int, sof: int = 0xC2) -> bytes:
    """A JPEG's header as cameras write it: SOI, an APP0 (JFIF) and an EXIF-like APP1, a DQT, then the frame
    header (progressive by default) declaring the size, and a scan."""
    def seg(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body

    return (b"\xff\xd8" + seg(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00") + seg(0xE1, b"Exif\0\0" + bytes(40))
            + seg(0xDB, b"\x00" + bytes(64)) + seg(sof, b"\x08" + struct.pack(">HH", height, width) + b"\x01\x01\x11\x00")
            + seg(0xDA, b"\x01\x01\x00\x00\x3f\x00") + b"\x00" * 16 + b"\xff\xd9")


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00" + b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"


def webp(chunk: bytes, body: bytes) -> bytes:
    payload = b"WEBP" + chunk + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


def vp8(width: int, height: int) -> bytes:
    return webp(b"VP8 ", b"\x10\x02\x00\x9d\x01\x2a" + struct.pack("<HH", width, height) + bytes(8))


def vp8l(width: int, height: int) -> bytes:
    return webp(b"VP8L", b"\x2f" + struct.pack("<I", (width - 1) | (height - 1) << 14) + bytes(8))


def vp8x(width: int, height: int) -> bytes:
    return webp(b"VP8X", b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little"))


@pytest.mark.parametrize(("data", "size"), [
    (png(640, 480), (640, 480)), (png(100_000, 100_000), (100_000, 100_000)),
    (jpeg(4032, 3024), (4032, 3024)), (jpeg(9000, 20, sof=0xC0), (9000, 20)), (gif(65_535, 65_535), (65_535, 65_535)),
    (vp8(1024, 768), (1024, 768)), (vp8l(16_383, 2), (16_383, 2)), (vp8x(20_000, 1), (20_000, 1)),
    # a header that says nothing readable: the provider judges it, as before
    (b"\xff\xd8\xff" + b"a" * 64, None), (b"\x89PNG\r\n\x1a\n" + b"receipt: coffee 3.50", None),
    (b"\xff\xd8\xff\xe0" + bytes(64), None),
])
def test_the_size_an_images_header_declares_is_read_without_decoding_it(data: bytes, size: tuple[int, int] | None,
                                                                        ) -> None:
    kind = attachments.image_type(data)
    assert kind is not None
    assert attachments.image_size(data, kind) == size
    too_big = size is not None and max(size) > attachments.MAX_IMAGE_SIDE
    assert (attachments.unsendable(data, kind) is not None) == too_big


def test_a_members_image_declaring_too_many_pixels_is_described_not_sent_and_their_next_photo_is(tmp_path) -> None:
    """A group member's PNG of 100,000 x 100,000 px in 200-odd bytes: filed in the room and told of, never attached
    (the provider would refuse every later request of the group); a header of 0 px the same; their next photo,
    within the limits, is attached, and the bomb is not sent again with it."""
    bomb, blank, fine = png(100_000, 100_000), png(0, 5), png(64, 48)
    assert len(bomb) < 1000

    async def main() -> None:
        async with gateway(tmp_path, {"type": "anthropic", "api_key": "sk-ant-test"}, "claude-sonnet-4-5") as s:
            await s.send(chat_id=GROUP, chat_type="supergroup", from_id=MEMBER, first_name="Gus", text="look",
                         photo=bomb)
            parts = s.user_parts()
            assert anthropic_images(parts) == []
            assert text_of(parts).endswith("; not attached for you to see: 100,000 × 100,000 pixels, over the 8,000 "
                                           "a side an image may have)")
            room_inbox = s.rt.confinement.room(GROUP_KEY).path / "inbox"
            assert [p.read_bytes() for p in room_inbox.iterdir()] == [bomb]  # kept for the room's tools

            await s.send(chat_id=GROUP, chat_type="supergroup", from_id=MEMBER, first_name="Gus", text="and this",
                         photo=blank)
            assert anthropic_images(s.user_parts()) == []
            assert text_of(s.user_parts()).endswith("; not attached for you to see: its header says it is 0 pixels "
                                                    "wide or high)")

            await s.send(chat_id=GROUP, chat_type="supergroup", from_id=MEMBER, first_name="Gus", text="this one",
                         photo=fine)
            every = [img for m in s.body()["messages"] if m["role"] == "user" for img in anthropic_images(m["content"])]
            assert [media for media, _ in every] == ["image/png"]
            assert text_of(s.user_parts()).endswith("; attached for you to see (image/png))")
    run(main, timeout=120)


@pytest.mark.parametrize(("provider", "model_id", "refusal"), [
    ({"type": "anthropic", "api_key": "sk-ant-test"}, "claude-sonnet-4-5",
     "messages.0.content.1.image.source.base64: The image was specified using the image/jpeg media type, but does "
     "not appear to be a valid jpeg image"),
    ({"type": "openai-compatible", "models": {"llava:13b": {"input": ["text", "image"]}}}, "llava:13b",
     "You uploaded an unsupported image. Please make sure your image is valid."),
])
def test_a_session_whose_image_the_provider_refuses_goes_on_without_images(tmp_path, provider: dict[str, Any],
                                                                           model_id: str, refusal: str) -> None:
    """A file that starts like a JPEG and is none (any member can send one; nothing but a decoder tells) is
    attached; the provider answers 400 to every request holding it. The turn, and every later one of the session
    (the image stays in the history), is sent again without images, each message saying how many of its own were
    left out — where the session was answered with an error from then on until /new. Non-streamed and streamed."""
    junk = base64.b64encode(b"\xff\xd8\xff\xe0" + b"<html>not a picture</html>").decode()
    fake = FakeProvider([{"error": 400, "message": refusal, "match": {"contains": junk}, "repeat": True},
                         {"text": "Seen.", "repeat": True}]).start()
    try:
        base = fake.base_url if provider["type"] == "anthropic" else fake.openai_base_url
        loaded = build_config({"agents": {"defaults": {"timezone": "Europe/Paris"}}, "models": {"providers": {
            "p": {**provider, "base_url": base, "max_retries": 0}}}}, StatePaths(tmp_path / "home"))
        rt = runtime(loaded, build_model(f"p/{model_id}", loaded.config.models, {}))
        try:
            assert rt.model.profile.supports_images
            first = rt.run_turn("agent:main:main", "what is this?", images=(ImagePart("image/jpeg", junk),))
            deltas: list[object] = []
            second = rt.run_turn("agent:main:main", "and now?", on_event=deltas.append)
            assert (first.reply, second.reply) == ("Seen.", "Seen.")
            # The refusal is recorded with the session: the next turn does not send the image again
            # (test_image_refused_once.py).
            assert [junk in json.dumps(r.body) for r in fake.requests] == [True, False, False]
            assert ("[1 image(s) not sent: the provider refused this conversation's images]"
                    in json.dumps(fake.requests[1].body))
            assert "[an image not sent: the provider refused it]" in json.dumps(fake.requests[2].body)
            for sent in fake.requests[1:]:
                assert "what is this?" in json.dumps(sent.body)
            assert fake.requests[2].body.get("stream") is True
            assert junk in transcript_bytes(rt, "agent:main:main").decode()  # the transcript is not touched
        finally:
            rt.close()
    finally:
        fake.stop()


def test_a_refusal_naming_an_image_of_a_request_without_images_is_not_sent_again(tmp_path) -> None:
    from hermit.models.base import ImageRefused

    fake = FakeProvider([{"error": 400, "message": "image_url is not supported by this model", "repeat": True}]).start()
    try:
        loaded = build_config({"agents": {"defaults": {"timezone": "Europe/Paris"}}, "models": {"providers": {
            "p": {"type": "openai-compatible", "base_url": fake.openai_base_url, "max_retries": 0}}}},
            StatePaths(tmp_path / "home"))
        rt = runtime(loaded, build_model("p/qwen3", loaded.config.models, {}))
        try:
            with pytest.raises(ImageRefused):
                rt.run_turn("agent:main:main", "hello")
            assert len(fake.requests) == 1
        finally:
            rt.close()
    finally:
        fake.stop()
