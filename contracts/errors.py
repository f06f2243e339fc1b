"""Error types that cross package boundaries.

Each package keeps its own error type for bad input (RelayError, ExportError, SelectorError,
SpecError, ...), and each derives from `BadInput`. An outage is apart from those: the input
was fine, a service it needs (GitHub, HUD, Redis, History) was down or unreachable, and the
same call may succeed later; every package's outage error derives from `Unavailable`. The
category is the type's, so the CLI maps them all to an exit code in one place (`BadInput` 2,
`Unavailable` 3) with no translation in between, and a caller tells an outage from a refusal
by type, never by the words of a message.
"""

from __future__ import annotations


class BadInput(Exception):
    """The input as given (a file, a flag, a variable, a config, a delivery) cannot be used;
    the message names it and says what to do. Retrying the same input fails the same way."""


class Unavailable(Exception):
    """A service was down or unreachable (after any retries); retrying later may succeed.

    Deliberately not a ValueError: nothing was wrong with the input, and code that turns
    ValueErrors into "bad input" answers must not swallow an outage.
    """


class Refused(BadInput, ValueError):
    """A service, or the adapter in front of it, refused a call as it was made (a 4xx, a
    missing credential, an argument outside the service's limits): retrying the same call
    fails the same way, so the caller reports it as bad input.

    Adapters handed across a package boundary (relay's GitHub adapter to dashboard_export)
    raise this or `Unavailable`, so the receiver needs no import of the adapter's package.
    """
