"""A model or embeddings server on this machine run by another login user is refused (hermit.loopback).

The check itself lives in the foundation module hermit.loopback, which the chat channels use too; this
module keeps the models' import path and their hint.
"""

from __future__ import annotations

from hermit.loopback import (
    MODEL_STAKES,
    Holder,
    foreign_holder,
    foreign_peer,
    guard_stream,
    sys_uid_max,
    trusted_uid,
)

__all__ = ["HINT", "MODEL_STAKES", "Holder", "foreign_holder", "foreign_peer", "guard_stream", "sys_uid_max",
           "trusted_uid"]

HINT = ("start the model server as yourself (e.g. `ollama serve`), as root or as a system account "
        "(Ollama's installer runs it as the user `ollama`); if another user's program holds the port, "
        "stop it or ask an administrator to")
