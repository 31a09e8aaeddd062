"""chat.image on a session of N photos fetched one by one, as the web app does after chat.history named them.

    PYTHONPATH=SRC python bench/chat_image_bench.py [--photos 40] [--kib 300] [--rounds 3]

Writes a transcript of N user turns with one JPEG-sized photo each (in a temp dir), then per round: chat.history
with `imageRefs` (the page opening the session), then chat.image for each photo in order — through
gateway/history.py's functions, with the gateway's photo index (gateway/image_index.py) when SRC has one (else
the tree before it, which read and decoded the whole transcript per request). Prints the wall (and CPU) time of
the history call and of the N fetches, and the bytes base64-decoded (counted by wrapping the real b64decode).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hermit.gateway import history
from hermit.messages import AssistantMessage, ImagePart, TextPart, UserMessage
from hermit.sessions.store import SessionStore

try:
    from hermit.gateway.image_index import PhotoIndex
except ImportError:  # the tree before the index
    PhotoIndex = None  # type: ignore[assignment,misc]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--photos", type=int, default=40)
    ap.add_argument("--kib", type=int, default=300, help="bytes of each photo, in KiB")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    decoded = [0]
    real = base64.b64decode

    def counting(data: Any, *a: Any, **k: Any) -> bytes:
        out = real(data, *a, **k)
        decoded[0] += len(out)
        return out

    base64.b64decode = counting  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp) / "sessions", cwd=Path(tmp), fsync=False)
        opened = store.get_or_create("notes")
        t = store.open_transcript(opened.record)
        photos = [b"\xff\xd8\xff" + bytes([n % 256]) * (args.kib * 1024) for n in range(args.photos)]
        for n, raw in enumerate(photos):
            t.append_message(UserMessage(f"photo {n}", (ImagePart("image/jpeg", base64.b64encode(raw).decode()),)).to_dict())
            t.append_message(AssistantMessage((TextPart(f"seen {n}"),), model="m", provider="p").to_dict())
        size = store.transcript_path(opened.record.session_id).stat().st_size
        hashes = [hashlib.sha256(p).hexdigest() for p in photos]
        rows = []
        for _ in range(args.rounds):
            index = PhotoIndex() if PhotoIndex is not None else None  # a gateway just started
            extra = {"photos": index} if index is not None else {}
            decoded[0] = 0
            t0, c0 = time.perf_counter(), time.process_time()
            history.chat_history(store, "notes", 50, images=True, image_refs=True, **extra)
            t1, c1 = time.perf_counter(), time.process_time()
            hist_bytes = decoded[0]
            decoded[0] = 0
            for h in hashes:
                got = history.session_image(store, "notes", None, h, *([index] if index is not None else []))
                assert got is not None and got["sha256"] == h
            t2, c2 = time.perf_counter(), time.process_time()
            rows.append((t1 - t0, t2 - t1, hist_bytes, decoded[0], c1 - c0, c2 - c1))
    print(f"tree: {'with the photo index' if PhotoIndex is not None else 'before (no index)'} · {args.photos} photos "
          f"of {args.kib} KiB · transcript {size / 2**20:.1f} MiB · {args.rounds} rounds (median)")
    print(f"chat.history: {statistics.median(r[0] for r in rows) * 1000:.0f} ms "
          f"({statistics.median(r[4] for r in rows) * 1000:.0f} ms CPU), "
          f"{statistics.median(r[2] for r in rows) / 2**20:.1f} MiB decoded")
    print(f"{args.photos} × chat.image: {statistics.median(r[1] for r in rows) * 1000:.0f} ms "
          f"({statistics.median(r[5] for r in rows) * 1000:.0f} ms CPU), "
          f"{statistics.median(r[3] for r in rows) / 2**20:.1f} MiB decoded")


if __name__ == "__main__":
    main()
