"""A DSN that libpq cannot parse never puts its password into an error.

libpq quotes the piece of a connection string it cannot parse: a URL whose password holds a bare `%`
(`postgresql://hermit:50%off@db/hermit`, the password never percent-encoded) or a space fails with
`invalid percent-encoded token: "50%off"`. That message became the StoreError of every memory_search — a
tool result the model provider gets and a chat's model may repeat — and of `hermit doctor`: the password in
clear. No server is needed: the DSN fails before any connection is tried.
"""

from __future__ import annotations

import pytest

from hermit.errors import HermitError
from hermit.memory.store.postgres.errors import failure
from hermit.memory.store.postgres.schema import connect, scrub

PASSWORD_DSNS = [
    ("postgresql://hermit:50%off-Sup3r@127.0.0.1:9/hermit", "50%off-Sup3r"),
    ("postgresql://hermit:pa ss-Sup3r@127.0.0.1:9/hermit", "pa ss-Sup3r"),
    ("postgresql://hermit:Sup3r-%zz@[::1/hermit", "Sup3r-%zz"),
    ("host=127.0.0.1 password=Sup3r-secret dbname", "Sup3r-secret"),
]


@pytest.mark.parametrize(("dsn", "password"), PASSWORD_DSNS)
def test_an_unparsable_dsn_never_puts_its_password_into_the_error(dsn: str, password: str) -> None:
    with pytest.raises(HermitError) as e:
        connect(dsn, timeout_s=1, dsn_env="HERMIT_PG_DSN")
    shown = f"{e.value.message}\n{e.value.hint}"
    assert "HERMIT_PG_DSN" in shown  # still says which variable to fix
    for piece in (password, password.split("-")[0], "Sup3r"):
        assert piece not in shown, shown


@pytest.mark.parametrize(("dsn", "password"), PASSWORD_DSNS)
def test_a_store_failure_on_such_a_dsn_hides_the_password(dsn: str, password: str) -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as raised:
        err: Exception = raised
    else:  # parsable: a message that echoes the password itself
        err = psycopg.OperationalError(f'bad value "{password}"')
    assert password not in failure(dsn, err).message
    assert password not in scrub(str(err), dsn)


def test_what_libpq_says_about_a_parsable_dsn_is_kept() -> None:
    dsn = "postgresql://hermit:s3cret@127.0.0.1:9/hermit?sslmode=bogus"
    assert scrub('invalid sslmode value: "bogus"', dsn) == 'invalid sslmode value: "bogus"'
    assert "s3cret" not in scrub('password authentication failed: "s3cret"', dsn)
