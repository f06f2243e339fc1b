"""Why a failing variant failed, as Verify decided: the one classification every package uses.

`selector.verify` decides it (`FailureVerdict.classification`), workflows records it per
failing variant, and `dashboard_export` carries it in every RunRecord. Its values are the
strings run.json and the HUD rows have always held.
"""

from __future__ import annotations

from enum import StrEnum


class Classification(StrEnum):
    NEW = "new"  # passes on the baseline, fails here: a regression
    PRE_EXISTING = "pre-existing"  # fails on the baseline too
    FLAKY = "flaky"  # failed, then passed on rerun
