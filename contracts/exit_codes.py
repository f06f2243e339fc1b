"""What a `spyre-ci` command's exit code means: one meaning per code, for every command.

A script (a CI job, a cron line, the relay's worker) reads a code without knowing which
command gave it, so a code never means one thing here and another there:

| code | meaning |
|---|---|
| 0 | ok: green, ready, nothing found that needs action |
| 1 | new test failures: tests ran and failed because of what was tested (never anything else) |
| 2 | bad input: a file, flag, variable or delivery that cannot be used (the message names it) |
| 3 | infrastructure fault: the tests could not run or a service is down; nothing was learned |
| 4 | not tested: no verdict on the change (none of it applied, or it waits for a build) |
| 5 | a check answered "no": not ready, findings to act on, no culprit in the window |
| 130 | interrupted |
| 141 | the reader of the output went away |

Where a path is the question: a path that cannot be used as given (the state directory,
`$SPYRE_CI_STATE_DIR`, that is not a folder this process can create and write; an `--out`
that is a file) is bad input, 2, whichever command meets it, refused before anything is read
or written; a store or folder that was usable and failed while the command used it (a full
disk, History's database that cannot be read, Redis down) is an outage, 3.

spyre-ci's own failure (an unexpected exception, printed with its traceback) is 3 as well:
Python's 1 for a traceback would read as a test verdict.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    NEW_FAILURES = 1
    BAD_INPUT = 2
    INFRASTRUCTURE = 3
    NOT_TESTED = 4
    CHECK_FAILED = 5
    INTERRUPTED = 130
    BROKEN_PIPE = 141
