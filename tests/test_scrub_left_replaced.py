"""An append (or a read) that opens a transcript just as a scrub renames the new file over it opens the new one
(sessions/files.py `open_own`).

The old file, opened by name a moment before the rename, has no name left when it is looked at (fstat: 0 links),
and was refused as someone else's ("has 0 names (hard links)"): a delete's `retracted` entry was lost (its message
stayed visible and unscrubbed) once in a dozen floods of 500 deletes, and a turn's reply could be lost alike. The
rename here is a real one, made at that moment by a wrapper of os.fstat, as a scrub running in another thread does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermit.sessions.transcript import Transcript, read_transcript

KEY = "agent:main:telegram:dm:own-c1"


def test_an_append_opening_the_transcript_as_a_scrub_replaces_it_lands_in_the_new_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sessions" / "s1.jsonl"
    t = Transcript.create(path, cwd=tmp_path, session_key=KEY, fsync=False)
    t.append_message({"role": "user", "content": [{"type": "text", "text": "hello"}], "ref": "telegram:default:1"})
    new = path.with_name(".s1.jsonl.scrubbed.tmp")
    new.write_bytes(path.read_bytes())  # the scrub's new file: the same lines (here nothing to scrub)
    new.chmod(0o600)
    real = os.fstat
    replaced: list[int] = []

    def fstat(fd: int) -> os.stat_result:
        st = real(fd)
        if not replaced and os.path.exists(new) and st.st_ino == os.stat(path).st_ino:  # the transcript, by name
            os.replace(new, path)  # the scrub's rename, right after this open
            replaced.append(fd)
        return real(fd)

    monkeypatch.setattr(os, "fstat", fstat)
    appender = Transcript.open(path, fsync=False)
    appender.append_custom("retracted", {"ref": "telegram:default:1"})
    monkeypatch.setattr(os, "fstat", real)
    assert replaced
    read = read_transcript(path)
    assert not read.problems and '"customType":"retracted"' in path.read_text()
