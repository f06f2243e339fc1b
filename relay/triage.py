"""Incoming `workflow.triage_verdict`: checked as PyTorch's relay checks it, never trusted.

A downstream may attach a verdict saying why its CI failed (`upstream`, `backend`, `infra`,
`flake`, `unknown`). The contract is pytorch/test-infra's
`aws/lambda/cross_repo_ci_relay/utils/triage_verdict.py` and the callback action's
`triage-verdict` input:

* a structural violation (a wrong type, an unknown category or confidence, another
  `schema_version`, a `suspected_upstream` on a non-upstream verdict, a link that is not a
  plain http(s) URL, more than 16 KiB in all) drops the whole verdict: the callback is
  handled as if it carried none;
* an overflow (a long summary, too many evidence entries) is cut to its cap;
* unknown keys are left out, so a newer analyzer's additive field does not drop the rest.

    verdict = checked_verdict(workflow.get("triage_verdict"))   # dict, or None to drop
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CATEGORIES = frozenset({"upstream", "backend", "infra", "flake", "unknown"})
CONFIDENCES = frozenset({"high", "medium", "low"})
MAX_BYTES = 16 * 1024
SUMMARY_CAP = 1000
REASON_CAP = 300
EVIDENCE_CAP = 10
EXCERPT_CAP = 1000
SHORT_CAP = 200
URL_CAP = 500
_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")


class Dropped(ValueError):
    """The verdict breaks the contract's structure; the message says where."""


def checked_verdict(raw: object) -> dict[str, Any] | None:
    """The verdict normalized to the contract, or None (absent, or dropped with a log line)."""
    if raw is None:
        return None
    try:
        return normalized(raw)
    except Dropped as exc:
        log.warning("triage_verdict dropped: %s", exc)
        return None


def normalized(raw: object) -> dict[str, Any]:
    """The verdict as the contract keeps it; raises Dropped on a structural violation."""
    if not isinstance(raw, Mapping):
        raise Dropped("triage_verdict must be an object")
    size = len(json.dumps(raw, default=str).encode("utf-8"))
    if size > MAX_BYTES:
        raise Dropped(f"triage_verdict is {size} bytes, over the {MAX_BYTES}-byte cap")
    version = raw.get("schema_version")
    if isinstance(version, str) and version.strip().isdigit():
        version = int(version.strip())
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise Dropped(f"schema_version {raw.get('schema_version')!r} is not {SCHEMA_VERSION}")
    category = _text(raw.get("category"), "category", SHORT_CAP)
    if category not in CATEGORIES:
        raise Dropped(f"unknown category {category!r}")
    confidence = _text(raw.get("confidence"), "confidence", SHORT_CAP)
    if confidence not in CONFIDENCES:
        raise Dropped(f"unknown confidence {confidence!r}")
    verdict: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "category": category,
        "confidence": confidence,
        "summary": _text(raw.get("summary"), "summary", SUMMARY_CAP),
    }
    suspected = raw.get("suspected_upstream")
    if suspected is not None:
        if category != "upstream":
            raise Dropped("suspected_upstream belongs to an 'upstream' verdict only")
        verdict["suspected_upstream"] = _suspected(suspected)
    evidence = raw.get("evidence")
    if evidence is not None:
        entries = _evidence(evidence)
        if entries:
            verdict["evidence"] = entries
    retried = raw.get("reproduced_on_retry")
    if retried is not None:
        if not isinstance(retried, bool):
            raise Dropped("reproduced_on_retry must be true or false")
        verdict["reproduced_on_retry"] = retried
    analyzer = raw.get("analyzer")
    if analyzer is not None:
        if not isinstance(analyzer, Mapping):
            raise Dropped("analyzer must be an object")
        fields = {
            name: _text(analyzer[name], f"analyzer.{name}", SHORT_CAP)
            for name in ("name", "version", "model", "prompt_version")
            if analyzer.get(name) is not None
        }
        if fields:
            verdict["analyzer"] = fields
    when = raw.get("analyzed_at")
    if when is not None:
        text = _text(when, "analyzed_at", SHORT_CAP)
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise Dropped("analyzed_at must be an ISO 8601 time") from None
        verdict["analyzed_at"] = text
    return verdict


def _text(value: object, field: str, cap: int) -> str:
    """A non-empty string (numbers and booleans are not coerced), cut to `cap`."""
    if not isinstance(value, str) or not value.strip():
        raise Dropped(f"{field} must be a non-empty string")
    return value.strip()[:cap]


def _suspected(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise Dropped("suspected_upstream must be an object")
    out: dict[str, Any] = {}
    pr = value.get("pr")
    if pr is not None:
        if isinstance(pr, bool) or not isinstance(pr, int) or pr <= 0:
            raise Dropped("suspected_upstream.pr must be a positive integer")
        out["pr"] = pr
    commit = value.get("commit")
    if commit is not None:
        sha = _text(commit, "suspected_upstream.commit", SHORT_CAP)
        if not _SHA.match(sha):
            raise Dropped("suspected_upstream.commit must be a hex git sha")
        out["commit"] = sha
    if value.get("reason") is not None:
        out["reason"] = _text(value["reason"], "suspected_upstream.reason", REASON_CAP)
    if "pr" not in out and "commit" not in out:
        raise Dropped("suspected_upstream must name a pr or a commit")
    return out


def _evidence(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise Dropped("evidence must be an array")
    entries = []
    for i, item in enumerate(value[:EVIDENCE_CAP]):
        if not isinstance(item, Mapping):
            raise Dropped(f"evidence[{i}] must be an object")
        entry = {
            name: _text(item[name], f"evidence[{i}].{name}", cap)
            for name, cap in (("job", SHORT_CAP), ("test", SHORT_CAP), ("excerpt", EXCERPT_CAP))
            if item.get(name) is not None
        }
        if item.get("log_url") is not None:
            entry["log_url"] = _link(item["log_url"], f"evidence[{i}].log_url")
        if entry:
            entries.append(entry)
    return entries


def _link(value: object, field: str) -> str:
    """A plain http(s) URL: a link rendered into a pull request's page must not be a script,
    a relative path, a `user@host` disguise or carry control characters."""
    url = _text(value, field, URL_CAP)
    try:
        parts = urlparse(url)
    except ValueError:
        raise Dropped(f"{field} is not a URL") from None
    plain = (
        parts.scheme in ("http", "https")
        and parts.netloc != ""
        and "@" not in parts.netloc
        and not any(c.isspace() or ord(c) < 0x20 for c in url)
    )
    if not plain:
        raise Dropped(f"{field} must be a plain http(s) URL")
    return url
