"""The four-stage test selector (Scout, Retrieve, Plan, Verify): pure functions over plain data.

No I/O and never torch. The entry points the workflows call:

    changes = ChangeSet.from_event(event, diff_text)       # or ChangeSet.from_diff(text)
    p = plan(changes, inventory, history, PlanConfig(...))  # stages 1-3 -> Plan (p.to_json())
    again = to_rerun(outcomes)                               # stage 4, step 1
    v = verify(p, outcomes, reruns, history, inventory)      # stage 4 -> Verdict
    history = apply_update(history, v.history_update)        # what a store records
"""

from selector.changeset import ChangedPath, ChangeSet
from selector.errors import SelectorError
from selector.explain import explain, why
from selector.history import History, HistoryUpdate, OutcomeRecord, VariantHistory, apply_update
from selector.impact import ImpactMap
from selector.index import InventoryIndex
from selector.plan import Plan, PlanConfig, Reason, Selected, plan
from selector.plan_parts import Budget, ChangeNote, Totals, TrialNote
from selector.scout import ChangeFacts, scout
from selector.verify import Metrics, Verdict, false_green_rate, to_rerun, verify

__all__ = [
    "Budget",
    "ChangeNote",
    "ChangeFacts",
    "ChangeSet",
    "ChangedPath",
    "History",
    "HistoryUpdate",
    "ImpactMap",
    "InventoryIndex",
    "Metrics",
    "OutcomeRecord",
    "Plan",
    "PlanConfig",
    "Reason",
    "Selected",
    "SelectorError",
    "Totals",
    "TrialNote",
    "VariantHistory",
    "Verdict",
    "apply_update",
    "explain",
    "false_green_rate",
    "plan",
    "scout",
    "to_rerun",
    "verify",
    "why",
]
