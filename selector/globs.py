"""Path globs in the PyTorch repository layout: `*` within a path segment, `**` across them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile `aten/src/ATen/native/**/SoftMax*.cpp`-style globs (`?`, `*`, `**`, `[...]`)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")  # zero or more whole directories
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    # A glob naming a directory (`torch/nn/`) covers everything below it.
    tail = ".*" if pattern.endswith("/") else ""
    return re.compile("".join(out) + tail + r"\Z")


def matches(pattern: str, path: str) -> bool:
    return glob_regex(pattern).match(path) is not None


def first_match(patterns: Iterable[str], path: str) -> str | None:
    for pattern in patterns:
        if glob_regex(pattern).match(path):
            return pattern
    return None
