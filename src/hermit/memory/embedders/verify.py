"""Model file integrity: check a pinned sha256 at load, remembering verified files by size and mtime.

Hashing the 72 MB e5 model costs ~0.2 s, too much for every cold `hermit memory search`; a stamp file
records (path, size, mtime_ns, sha256) after one full check, so the hash is recomputed only when the
file changes.
"""

from __future__ import annotations

import json
from pathlib import Path

from hermit.config.paths import ensure_private_dir
from hermit.durable import write_atomic
from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import sha256_file


def verify_model_file(path: Path, expected_sha256: str, stamp_dir: Path | None, what: str) -> None:
    try:
        st = path.stat()
    except FileNotFoundError as e:
        raise EmbeddingError(
            f"{what}: model file not found: {path}",
            "reinstall Hermit (`pip install --force-reinstall hermit`); the model ships inside the package",
        ) from e
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    stamp = stamp_dir / "verified-models.json" if stamp_dir else None
    known: dict[str, str] = {}
    if stamp is not None:
        try:
            known = json.loads(stamp.read_text())
        except (OSError, ValueError):
            known = {}
        if known.get(key) == expected_sha256:
            return
    actual = sha256_file(str(path))
    if actual != expected_sha256:
        raise EmbeddingError(
            f"{what}: model file {path} has sha256 {actual[:16]}…, expected {expected_sha256[:16]}…",
            "the model file is corrupt or a different version; reinstall the pinned package",
        )
    if stamp is not None:
        known[key] = actual
        try:
            ensure_private_dir(stamp.parent)  # may be the first thing to create the state dir
            write_atomic(stamp, json.dumps(known), fsync=False)
        except OSError:
            pass  # a read-only state dir only costs a re-hash next time
