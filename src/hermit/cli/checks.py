"""The `hermit doctor` check seam: the Check result, the @check decorator, and running a list of checks.

A check is a function `(ctx) -> str | Check` wrapped by `@check(name, fix=...)`: returning a string
means "ok, here is what I found"; returning a Check lets it say warn/fail itself; raising is a failure
whose message (and a HermitError's hint) is reported. A wrapped check never raises, so one broken part
never hides the report on the others. `needs` names earlier checks that must have passed: otherwise
the check is skipped with a reason instead of repeating their failure.

This lives apart from cli/doctor.py so that modules which contribute checks can import it while
doctor.py imports them (one line each in its CHECKS list).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

from hermit.errors import HermitError

if TYPE_CHECKING:
    from hermit.cli.context import CliContext

log = logging.getLogger(__name__)

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        """Only a failure makes `hermit doctor` exit non-zero; warnings and skips are advice."""
        return self.status != "fail"

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class CheckFn:
    """A check function with its name, default fix and prerequisites; calling it never raises."""

    name: str
    fn: Callable[[CliContext], str | Check]
    fix: str = ""
    needs: tuple[str, ...] = ()

    def __call__(self, ctx: CliContext) -> Check:
        try:
            out = self.fn(ctx)
        except HermitError as e:
            log.debug("doctor check %s failed", self.name, exc_info=True)
            return Check(self.name, "fail", e.message, e.hint or self.fix)
        except Exception as e:  # noqa: BLE001 - doctor reports every failure instead of crashing
            log.debug("doctor check %s failed", self.name, exc_info=True)
            return Check(self.name, "fail", f"{type(e).__name__}: {e}", self.fix)
        return out if isinstance(out, Check) else Check(self.name, "ok", out)


def check(name: str, fix: str = "", needs: Iterable[str] = ()) -> Callable[[Callable[[CliContext], str | Check]],
                                                                          CheckFn]:
    """Decorator turning `(ctx) -> str | Check` into a named, never-raising CheckFn."""

    def wrap(fn: Callable[[CliContext], str | Check]) -> CheckFn:
        return CheckFn(name, fn, fix, tuple(needs))

    return wrap


def run_checks(ctx: CliContext, checks: Iterable[CheckFn]) -> list[Check]:
    """Run every check in order; one whose prerequisites did not pass is reported as skipped."""
    done: dict[str, Check] = {}
    out: list[Check] = []
    for c in checks:
        missing = [n for n in c.needs if n in done and done[n].status in ("fail", "skip")]
        if missing:
            result = Check(c.name, "skip", f"not checked: needs a working {', '.join(missing)} (see above)")
        else:
            result = c(ctx)
        done[c.name] = result
        out.append(result)
    return out
