"""The local GitHub (`tests.servers.github_api`) answering as GitHub should not: any body
(a JSON array, an HTML page, a field of the wrong type) for chosen requests, or every answer
late. What a proxy, a broken server or a slow GitHub sends, over real HTTP.

    with OddGitHub() as gh:
        gh.answer("GET", r"/compare/", ["not", "an", "object"])
        gh.delay_s = 1.5   # every answer waits that long before it is sent
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from tests.servers.github_api import GitHubAPIServer, RecordedRequest


@dataclass
class _Answer:
    method: str
    pattern: re.Pattern[str]
    status: int
    payload: Any  # JSON, or bytes sent as they are
    headers: dict[str, str]


class OddGitHub(GitHubAPIServer):
    """`GitHubAPIServer` with answers of another shape and a delay for every answer."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._answers: list[_Answer] = []
        self.delay_s = 0.0

    def __enter__(self) -> OddGitHub:
        self.start()
        return self

    def answer(
        self,
        method: str,
        path_regex: str,
        payload: Any,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer every matching request with `payload` (JSON; bytes as they are)."""
        pattern = re.compile(path_regex)
        self._answers.append(_Answer(method.upper(), pattern, status, payload, headers or {}))

    def _handle(self, req: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow GitHub, as a test asks: the case under test
        for odd in self._answers:
            if odd.method == req.method and odd.pattern.search(req.path):
                self.requests.append(req)
                return odd.status, odd.payload, dict(odd.headers)
        return super()._handle(req)
