"""User-facing errors: bad input gets one clear line, never a deep traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


class UserError(Exception):
    """A problem the user can fix (a missing file, bad bytes, a mismatched checkpoint...).

    The message names the file (and line) and says what is wrong; entry points print it as
    one line and exit with status 2.
    """


def exit_on_user_error(fn: F) -> F:
    """Wrap an entry point so a UserError becomes `error: <message>` on stderr and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
