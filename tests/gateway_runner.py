"""`hermit gateway run` for end-to-end channel tests, pointing discord.py at a fake Discord first.

discord.py has no base-URL setting, so the fake's address arrives in HERMIT_TEST_FAKE_DISCORD and is
patched into this process before the gateway starts; every other platform takes its URL from config.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    fake = os.environ.get("HERMIT_TEST_FAKE_DISCORD")
    if fake:
        import discord.gateway
        import discord.http
        import yarl

        discord.http.Route.BASE = f"{fake}/api/v10"
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.replace("http://", "ws://") + "/gateway")
    from hermit.cli.main import main

    sys.exit(main(sys.argv[1:]))
