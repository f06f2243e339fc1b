"""What a run tested of its change: the one verdict every package reads, spelled once.

`workflows.run.under_test` decides it when a run is planned (and again at finish, for what
reached the tests that ran); planned.json, run.json, History's summary, the terminal, the
report, the callback and the HUD row carry it. Its values are the strings those files have
always held.
"""

from __future__ import annotations

from enum import StrEnum


class Tested(StrEnum):
    # The torch under test is the change's (its head, or its base with every file that
    # changes torch applied), or a bare diff applied whole.
    TESTED = "tested"
    # Some of the change could not be applied without a build, or it was applied on a torch
    # that is not its base.
    PARTIAL = "partial"
    # Nothing of what the change does to torch could be applied, or the torch under test is
    # not the one the event names: the run has no verdict on the change.
    NOT_TESTED = "not_tested"

    @property
    def headline(self) -> str:
        """One line on what the run tested of the change (GitHub's check-run wording: a run
        that could not test it is `neutral`, neither a pass nor a failure)."""
        return _HEADLINES[self]

    @classmethod
    def of(cls, value: object) -> Tested | None:
        """The verdict a JSON value names; None for none ("" or null: a record from before
        the verdict was kept). ValueError names a value that is none of the three."""
        if value is None or value == "":
            return None
        try:
            return cls(str(value))
        except ValueError:
            raise ValueError(
                f"tested must be one of {', '.join(t.value for t in cls)} or empty, not {value!r}"
            ) from None


_HEADLINES = {
    Tested.TESTED: "the change was tested",
    Tested.PARTIAL: "the change was tested in part",
    Tested.NOT_TESTED: "the change was NOT tested",
}
