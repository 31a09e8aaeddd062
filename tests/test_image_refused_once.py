"""An image the provider refused is refused once, not once per later turn.

A file that starts like a JPEG and is none (a member of a group can send one; only a decoder tells) is attached to
the turn's message; the provider answers 400 to any request holding it, and the request is made again without
images (models/base.complete_or_without_images). But the image stayed in the history, so every later turn of the
session was refused once more before its retry, until /new or 20 newer images: one wasted request per turn. Now the
refusal is recorded with the session (an `image-refused` entry in the transcript, sessions/entries.py): the image is
never sent again, after a restart too, while the session's other images still are. Real adapters (Anthropic's and
the OpenAI-compatible one) over HTTP to the fake provider.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.messages import ImagePart
from hermit.models import build_model
from hermit.testing import FakeProvider
from sessionhelpers import runtime, transcript_bytes

KEY = "agent:main:main"
JUNK = base64.b64encode(b"\xff\xd8\xff\xe0" + b"<html>not a picture</html>").decode()
GOOD = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"a fine picture" * 4).decode()
PROVIDERS = [
    pytest.param({"type": "anthropic", "api_key": "sk-ant-test"}, "claude-sonnet-4-5",
                 "messages.0.content.1.image.source.base64: The image was specified using the image/jpeg media "
                 "type, but does not appear to be a valid jpeg image", id="anthropic"),
    pytest.param({"type": "openai-compatible", "models": {"llava:13b": {"input": ["text", "image"]}}}, "llava:13b",
                 "You uploaded an unsupported image. Please make sure your image is valid.", id="openai-compatible"),
]


def setup(tmp_path: Path, provider: dict[str, Any], model_id: str, refusal: str) -> tuple[FakeProvider, Any]:
    fake = FakeProvider([{"error": 400, "message": refusal, "match": {"contains": JUNK}, "repeat": True},
                         {"text": "Seen.", "repeat": True}]).start()
    base = fake.base_url if provider["type"] == "anthropic" else fake.openai_base_url
    loaded = build_config({"agents": {"defaults": {"timezone": "Europe/Paris"}}, "models": {"providers": {
        "p": {**provider, "base_url": base, "max_retries": 0}}}}, StatePaths(tmp_path / "home"))

    def start() -> AgentRuntime:
        return runtime(loaded, build_model(f"p/{model_id}", loaded.config.models, {}))

    return fake, start


def sent(fake: FakeProvider) -> list[tuple[bool, bool]]:
    """For each request: (the refused image in it, the good one in it)."""
    return [(JUNK in json.dumps(r.body), GOOD in json.dumps(r.body)) for r in fake.requests]


@pytest.mark.parametrize(("provider", "model_id", "refusal"), PROVIDERS)
def test_a_refused_image_is_not_sent_again_in_later_turns_nor_after_a_restart(
        tmp_path: Path, provider: dict[str, Any], model_id: str, refusal: str) -> None:
    fake, start = setup(tmp_path, provider, model_id, refusal)
    try:
        rt = start()
        try:
            assert rt.run_turn(KEY, "here is a nice one", images=(ImagePart("image/png", GOOD),)).reply == "Seen."
            assert rt.run_turn(KEY, "what is this?", images=(ImagePart("image/jpeg", JUNK),)).reply == "Seen."
            deltas: list[object] = []
            assert rt.run_turn(KEY, "and now?", on_event=deltas.append).reply == "Seen."  # streamed
            # accepted; refused, then made again without images; the next turn: the good image, not the bad one
            assert sent(fake) == [(False, True), (True, True), (False, False), (False, True)]
            assert fake.requests[3].body.get("stream") is True
            assert "[an image not sent: the provider refused it]" in json.dumps(fake.requests[3].body)
            assert "what is this?" in json.dumps(fake.requests[3].body)
            assert JUNK in transcript_bytes(rt, KEY).decode()  # the message's line keeps what was sent
        finally:
            rt.close()
        rt = start()  # a restart: the refusal is read from the transcript
        try:
            assert rt.run_turn(KEY, "still there?").reply == "Seen."
            assert sent(fake)[4:] == [(False, True)]
        finally:
            rt.close()
    finally:
        fake.stop()


@pytest.mark.parametrize(("provider", "model_id", "refusal"), PROVIDERS[:1])
def test_when_no_image_is_new_every_image_of_the_refused_request_is_blamed(
        tmp_path: Path, provider: dict[str, Any], model_id: str, refusal: str) -> None:
    """The bad image came in a turn whose refusal was not recorded (an older Hermit): the next turn's request has
    no new image, so all of its images are blamed, and the turn after sends none of them."""
    fake, start = setup(tmp_path, provider, model_id, refusal)
    try:
        rt = start()
        try:
            rt.run_turn(KEY, "two pictures", images=(ImagePart("image/png", GOOD), ImagePart("image/jpeg", JUNK)))
            path = rt.store.transcript_path(rt.session(KEY).session_id)  # type: ignore[union-attr]
            lines = path.read_text().splitlines()
            path.write_text("\n".join(line for line in lines if '"image-refused"' not in line) + "\n")
        finally:
            rt.close()
        rt = start()
        try:
            rt.run_turn(KEY, "again")
            rt.run_turn(KEY, "and again")
            assert sent(fake) == [(True, True), (False, False), (True, True), (False, False), (False, False)]
        finally:
            rt.close()
    finally:
        fake.stop()
