"""The records a gateway trusts across restarts, checked to fail closed at start and at each applied reload.

Besides `<state>/channels/owner-routes.json` (gateway/owner_routes.py), a start trusts two records made in s22:
`<state>/credentials/accounts.json` (which bot each channel account is: channels/account_identity.py) and
`<state>/agents/workspaces.json` (which workspace each agent id used: config/workspaces_check.py). Read as "no
record" when damaged (a crash, bad JSON, a link, another user's) or deleted, each adopted whatever the config said
then: another bot kept the approvals of the old one, an agent got the workspace another one had used. Now such a
record refuses the start (`damaged`, asked by owner_routes.refusal: every entry point) and each live reload, naming
the file and `hermit channels accept-routes`, which shows what it would record and, after the owner's yes, records
the config as it is (`rerecord`). A missing record counts as damaged where a gateway has run before (the routes
record is there: `ran_before`); a genuinely first start adopts.

The live reload also asks what the start asks of an owner new to an agent whose recorded owners are all gone
(gateway/agent_heirs.py; `live_refusal`): an owner id added to a running account bound to such an agent was let in
until the next start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from hermit.config import records, workspaces_check
from hermit.config.load import LoadedConfig
from hermit.errors import ConfigError


def ran_before(home: Path) -> bool:
    """Whether a gateway of a version that writes the two records has run on this state dir: the routes record it
    writes at each start is there, and so is one of the two records (each start writes the workspaces record, and
    the accounts record when an account is configured). A state dir only a version from before the records ran on
    (routes, approvals, neither record) is not "a record lost": its first start adopts both, as a first start does,
    rather than refusing every upgraded gateway until `accept-routes`. One record gone while its sibling is there is
    still refused."""
    from hermit.channels.account_identity import record_path as accounts_path
    from hermit.gateway.owner_routes import path_of

    if not os.path.lexists(path_of(home)):
        return False
    return os.path.lexists(accounts_path(home)) or os.path.lexists(home / "agents" / workspaces_check.RECORD)


def problems(home: Path, loaded: LoadedConfig) -> list[records.UntrustedRecord]:
    """Each of the two records that cannot be trusted (see the module), as the refusal it makes."""
    from hermit.channels.account_identity import trusted

    before = ran_before(home)
    out = []
    for check in (lambda: trusted(home, loaded, before),
                  lambda: workspaces_check.trusted(loaded.agents, loaded.paths, before)):
        try:
            check()
        except records.UntrustedRecord as e:
            out.append(e)
    return out


def damaged(home: Path, loaded: LoadedConfig) -> None:
    """Raise the first record's refusal (see `problems`)."""
    if found := problems(home, loaded):
        raise found[0]


def rerecord(home: Path, loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    """Record the config as it is in both records (`hermit channels accept-routes`, after the owner's review)."""
    from hermit.channels.account_identity import rerecord as accounts
    from hermit.channels.pairing import PairingStore

    accounts(PairingStore(home), loaded, environ)
    workspaces_check.record(loaded.agents, loaded.paths, replace=True)


def live_refusal(home: Path, reached: Mapping[str, str], new: LoadedConfig,
                 started: LoadedConfig) -> ConfigError | None:
    """Why a running gateway may not apply `new` on these grounds: a record it trusts is damaged, or an owner id
    new to a running account's agent whose recorded owners (`reached`, what this gateway applied, with the record
    on disk) no longer reach it (agent_heirs)."""
    from hermit.config.channels import platforms
    from hermit.gateway.agent_heirs import heirs
    from hermit.gateway.owner_routes import UntrustedRecord, _recorded, parts_of, path_of, routes_now

    try:
        damaged(home, new)
        before = {**_recorded(path_of(home)), **reached}
    except UntrustedRecord as e:
        return e

    def enabled(c: LoadedConfig) -> set[tuple[str, str]]:
        return {(p, a) for p in platforms() for a, acc in c.config.channels.accounts_of(p).items() if acc.enabled}

    running = enabled(new) & enabled(started)  # an account added since is not running until a restart checks it
    now = {k: v for k, v in routes_now(new).items() if tuple(parts_of(k)[:2]) in running}
    if not (found := heirs(before, now, new)):
        return None
    return ConfigError(f"this edit would give {', '.join(found)} its main session (MEMORY.md, notes, owner tools)",
                       "give the account back its agent's owners, or the new owner another agent; to hand the agent "
                       "on on purpose, run `hermit channels accept-routes` (it shows who and asks) and restart the "
                       "gateway")
