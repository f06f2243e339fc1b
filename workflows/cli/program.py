"""The `spyre-ci` program (the console script, `python -m workflows`).

`spyre-ci run` is forked from the warm `spyre-ci` process when there is one
(`workflows.cli.warm_cli`): this module imports nothing else first, so that asking costs
the interpreter's start and a few milliseconds. Otherwise, and for every other command,
`workflows.cli.main.entry` runs the command in this process.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from workflows.cli import warm_cli


def entry() -> NoReturn:
    code = warm_cli.forked(sys.argv)
    if code is None:
        from workflows.cli.main import entry as in_this_process

        in_this_process()
    os._exit(code)
