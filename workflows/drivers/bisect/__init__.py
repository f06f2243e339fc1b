"""Virtual bisect: the upstream commit that made a variant fail, named without building torch.

    found = run(Target(repo, last_good, first_bad, variants, specs), adapter, work_dir)

`window` lists the window's commits (GitHub's compare, then each commit's files and patches)
and says which can be replayed on the installed torch (Python modules only); `search`
bisects the points of the window (point k: the base with the first k commits applied), each
decided by at least two agreeing runs; `replay` runs a point's variants with its cumulative
diff applied through the change overlay; `answer` turns a search into the culprit or the
smallest window with its evidence and confidence; `record` keeps it under the state
directory and adds it to a run's forensics, report and triage verdict. A `Deadline` bounds
the whole of it (GitHub's answers and the points' runs).
"""

from workflows.drivers.bisect.replay import BisectError, BisectInfra, Deadline, Target, run

__all__ = ["BisectError", "BisectInfra", "Deadline", "Target", "run"]
