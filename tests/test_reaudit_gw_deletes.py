"""The remembered deletes are bounded per sender across chats (gateway/deletes_store.py).

Anyone may send deletes (a stranger's are never checked against any message), and the bound of one sender's was
per chat: a stranger in a Discord server with many channels (or many Slack channels) deleted DELETES_PER_SENDER of
their own messages in each, evicted every delete another member's late message needed — which was then answered
and stored. One sender's deletes are now bounded on the whole channel account; a delete that names nobody
(Discord's of an uncached message) is bounded per chat, as before. The flood in memory (the file is written by the
same bound, a write per delete), then a real file read again.
"""

from __future__ import annotations

from pathlib import Path

from hermit.gateway.deletes_store import DELETES_KEPT, DELETES_PER_SENDER, RememberedDeletes


def test_a_strangers_deletes_in_many_channels_never_evict_a_members(tmp_path: Path) -> None:
    store = RememberedDeletes(clock=lambda: 1_800_000_000.0)
    member = ("discord", "default", "chan-0", "m1")
    store.remember(member, "member")
    channels = DELETES_KEPT // DELETES_PER_SENDER + 4
    for c in range(channels):
        for i in range(DELETES_PER_SENDER):
            store.remember(("discord", "default", f"chan-{c}", f"s{c}-{i}"), "stranger")
    path = tmp_path / "channels" / "deletes.json"
    on_disk = RememberedDeletes(path, clock=lambda: 1_800_000_000.0)
    for key, (who, _) in store._entries.items():
        on_disk.remember(key, who)
    again = RememberedDeletes(path, clock=lambda: 1_800_000_000.0)
    assert again.deleter(member) == "member"
    assert len(again) == 1 + DELETES_PER_SENDER  # the stranger's last ones only
    assert again.deleter(("discord", "default", f"chan-{channels - 1}", f"s{channels - 1}-0")) == "stranger"
    # Deletes naming nobody are kept per chat: one chat's flood of them leaves another chat's.
    for c in range(2):
        for i in range(DELETES_PER_SENDER + 3):
            again.remember(("discord", "default", f"anon-{c}", f"a{i}"), "")
    assert again.deleter(("discord", "default", "anon-0", "a3")) == ""
    assert again.deleter(("discord", "default", "anon-0", "a2")) is None
    assert again.deleter(member) == "member"
