"""`POST /github/callback`: downstream CI reports a job's progress (CRCR schema_version "1").

Long on purpose: the endpoint's steps run in one order (auth, JSON, allowlist, rate limit,
fields, transition, HUD, commit, check run), each with its own answer, as methods of one
`CallbackService`; reading the module top to bottom reads the protocol, which a split by step
would scatter.

Steps, each with its own answer: bearer auth (401) -> JSON (400) -> allowlist (a repo not on
it, at L1, or not taking part in the callback's event, is ignored: 200 and nothing written, as
the reference relay does) -> per-repo
rate limit (429; 503 when Redis is down: fail closed) -> fields (400) -> state transition (400
for no dispatch, duplicate or skipped state) -> HUD forward (502 if HUD stays down, HUD's own
4xx if it refuses the body; either way the state is left unchanged so a fixed or later retry
is taken; HUD's 409, its write-once rule, is a duplicate: 200, and the job moves on as if HUD
had taken it) -> commit -> check run for L3/L4 on a pull request's head (best effort: GitHub
trouble never fails a callback; its calls follow the publishing retry policy, and a `success`
whose counts and listed tests disagree completes it `neutral`). Nightly and periodic results
come as one `completed` callback, without a dispatch and without the state machine.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import redis
from jsonschema import Draft202012Validator

from contracts.errors import Unavailable
from dashboard_export import retry
from dashboard_export.evidence import callback_gaps, checked_conclusion
from dashboard_export.retry import RetryPolicy
from relay.allowlist import Allowlist, AllowlistEntry, AllowlistFile, logical_event
from relay.callback_auth import BearerAuth, Unauthorized
from relay.config import RelayConfig
from relay.crcr_state import (
    IN_PROGRESS,
    SCHEDULED_EVENTS,
    CrcrState,
    JobKey,
    Plan,
    Rejected,
    StateUnavailable,
    callback_of,
    plan,
)
from relay.demotion import Demotions
from relay.events import RelayError, RelayUnavailable
from relay.github import GitHubAdapter, GitHubUnavailable
from relay.triage import checked_verdict

log = logging.getLogger("relay.callback")
T = TypeVar("T")

# What the relay itself needs (the upstream relay's required fields); the rest is typed when
# present but optional, so any downstream speaking schema_version "1" is accepted.
CALLBACK_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["delivery_id", "workflow"],
    "properties": {
        "event_type": {"type": "string", "maxLength": 100},
        "delivery_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "payload": {"type": ["object", "null"]},
        "workflow": {
            "type": "object",
            "required": ["status", "run_id", "name"],
            "properties": {
                # Optional, as for the reference relay; a version we do not speak is refused.
                "schema_version": {"enum": ["1", 1]},
                "status": {"enum": ["in_progress", "completed"]},
                "conclusion": {"type": ["string", "null"], "maxLength": 100},
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "url": {"type": ["string", "null"]},
                # GitHub's run id is a number; Buildkite's a build UUID: both are taken.
                "run_id": {
                    "type": ["string", "integer"],
                    "minLength": 1,
                    "maxLength": 200,
                    "pattern": "^[^:]+$",
                },
                "run_attempt": {"type": ["string", "integer"], "pattern": "^[0-9]{1,9}$"},
                "job_name": {"type": ["string", "null"], "maxLength": 200},
                "check_run_id": {"type": ["string", "integer", "null"]},
                "started_at": {"type": ["string", "null"]},
                "completed_at": {"type": ["string", "null"]},
                "test_results": {"type": ["object", "null"]},
                "artifact_url": {"type": ["string", "null"]},
                # The callback action's per-test detail; HUD keeps the first 50 entries.
                "failed_tests_detail": {
                    "type": ["array", "null"],
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": ["string", "null"]},
                            "classname": {"type": ["string", "null"]},
                            "message": {"type": ["string", "null"]},
                            "duration": {"type": ["number", "string", "null"]},
                        },
                    },
                },
            },
        },
    },
}
_VALIDATOR = Draft202012Validator(CALLBACK_SCHEMA)
# Publishes one relay-to-HUD envelope (dashboard_export.publish.publish_hud): raises
# contracts.errors.Unavailable when HUD stays down; anything else it raises is a refusal of
# the body (dashboard_export.PublishRefused carries HUD's own 4xx).
HudPublisher = Callable[[Mapping[str, Any]], Any]
HUD_DUPLICATE = 409  # HUD's answer to a write on a record that is already final
CIFLOW_TRUNK_REF = re.compile(r"/ciflow/trunk/(\d+)$")
NULL_SHA = "0" * 40


class CallbackService:
    """Everything behind `POST /github/callback`; `handle` returns (status, message, extra)."""

    def __init__(
        self,
        config: RelayConfig,
        client: redis.Redis,
        adapter: GitHubAdapter | None = None,
        hud: HudPublisher | None = None,
        clock: Callable[[], float] = time.time,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.config = config
        self.state = CrcrState(client)
        self.auth = BearerAuth(config.callback_tokens, config.oidc, config.ci_providers)
        self.allowlist: Allowlist | AllowlistFile | None = (
            AllowlistFile(config.allowlist) if config.allowlist else None
        )
        self.adapter = adapter
        self.hud = hud if hud is not None else default_hud_publisher(config)
        self.clock = clock
        # Check runs are published as HUD is: the one retry policy (dashboard_export.retry).
        self.retry_policy = retry_policy if retry_policy is not None else RetryPolicy.from_env()
        self.sleep: Callable[[float], None] = time.sleep
        self.demotions = (
            Demotions(adapter, self.state, config.upstream_repo) if adapter is not None else None
        )

    def handle(self, authorization: str | None, body: bytes) -> tuple[int, str, dict[str, Any]]:
        try:
            return self._handle(authorization, body)
        except Unauthorized as exc:
            return 401, str(exc), {}
        except Rejected as exc:
            log.info("callback rejected: %s", exc)
            return 400, str(exc), {}
        except StateUnavailable as exc:
            log.error("callback refused, Redis unavailable: %s", exc)
            return 503, "state store unavailable; nothing was recorded, retry", {}
        except HudDown as exc:
            log.error("callback not recorded: %s", exc)
            return 502, f"{exc}; nothing was recorded, retry", {}
        except HudRefused as exc:
            log.warning("callback refused by HUD: %s", exc)
            return exc.status, f"{exc}; nothing was recorded", {}

    def _handle(self, authorization: str | None, body: bytes) -> tuple[int, str, dict[str, Any]]:
        repo = self.auth.verify(authorization)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return 400, f"body is not JSON: {exc}", {}
        entry = self.allowlist.get(repo) if self.allowlist else None
        if entry is None or not entry.hud:
            why = "not on the CRCR allowlist" if entry is None else "at L1 (no HUD results)"
            log.info("callback from %s ignored: %s", repo, why)
            return 200, "ignored", {"ok": True, "reason": f"{repo} is {why}"}
        event_type = str(data.get("event_type") or "") if isinstance(data, Mapping) else ""
        if not entry.takes_part(event_type):
            why = f"not taking part in {logical_event(event_type)} events (allowlist events)"
            log.info("callback from %s ignored: %s", repo, why)
            return 200, "ignored", {"ok": True, "reason": f"{repo} is {why}"}
        now = self.clock()
        if not self.state.allow(repo, self.config.callback_rate_per_minute, now):
            return 429, f"{repo}: over {self.config.callback_rate_per_minute} callbacks/min", {}
        problems = sorted(_VALIDATOR.iter_errors(data), key=lambda e: e.json_path)
        if problems:
            first = problems[0]
            return 400, f"callback body: {first.json_path}: {first.message}", {}
        workflow = data["workflow"]
        if "triage_verdict" in workflow:
            # Advisory and untrusted: kept as the contract normalizes it, or dropped whole.
            verdict = checked_verdict(workflow["triage_verdict"])
            if verdict is None:
                workflow.pop("triage_verdict")
            else:
                workflow["triage_verdict"] = verdict
        if event_type in SCHEDULED_EVENTS:
            # Nightly/periodic runs report once, keyed by the upstream sha: no state machine.
            if workflow["status"] != "completed":
                return (
                    400,
                    (
                        f"{event_type} callbacks report once, with status 'completed', "
                        f"not {workflow['status']!r}"
                    ),
                    {},
                )
            forwarded = self._forward(data, repo, entry, None, None, duplicate_ok=True)
            if forwarded == "duplicate":
                return 200, "duplicate", {"ok": True, "hud": forwarded}
            return 200, "recorded", {"ok": True, "hud": forwarded}
        key = JobKey(
            str(data["delivery_id"]),
            repo,
            str(workflow["run_id"]),
            str(workflow.get("run_attempt") or 1),
            str(workflow.get("job_name") or ""),
        )
        current, dispatched_at = self.state.read(key)
        change = plan(workflow["status"], current, dispatched_at, now, key.redis_key)
        if change.state == IN_PROGRESS and not self.state.first_to_start(key):
            # One queue_time sample per run: a later job's start waited on earlier jobs.
            fields = {k: v for k, v in change.fields.items() if k != "queue_time"}
            change = replace(change, queue_time=None, fields=fields)
        try:
            forwarded = self._forward(
                data,
                repo,
                entry,
                change.queue_time if change.state == IN_PROGRESS else None,
                change.execution_time,
                duplicate_ok=True,
            )
        except HudRefused:
            if change.state == IN_PROGRESS:
                self.state.note_refused_start(key, now)
            raise
        extra = {
            "callback": json.dumps(data, separators=(",", ":")),
            "conclusion": _check_run_conclusion(workflow, key.repo),
            "level": entry.level,
            "repo": repo,
        }
        self.state.commit(key, change, now, extra)
        started_at = (
            now
            if change.state == IN_PROGRESS
            else _float(change.fields.get("in_progress_at", (current or {}).get("in_progress_at")))
        )
        check = self._check_run(key, entry, data, change, started_at, now)
        return (
            200,
            "duplicate" if forwarded == "duplicate" else change.state.lower(),
            {
                "ok": True,
                "queue_time": change.queue_time,
                "execution_time": change.execution_time,
                "hud": forwarded,
                "check_run": check,
            },
        )

    def _forward(
        self,
        callback: Mapping[str, Any],
        repo: str,
        entry: AllowlistEntry,
        queue_time: float | None,
        execution_time: float | None,
        duplicate_ok: bool = False,
    ) -> str:
        """Send the result to HUD: "forwarded", or "duplicate" when HUD answers 409 (its
        record is final already) and `duplicate_ok`."""
        if self.hud is None:
            return "not forwarded: no HUD configured"
        from dashboard_export.crcr import hud_envelope

        envelope = hud_envelope(
            for_hud(callback),
            verified_repo=repo,
            level=entry.level,
            queue_time=queue_time,
            execution_time=execution_time,
        )
        try:
            self.hud(envelope)
        except Unavailable as exc:
            raise HudDown(f"HUD did not take the result: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - any other failure is a refusal of the body
            # A body HUD (or its schema, checked before sending) refuses: the caller's to fix.
            status = _refusal_status(exc)
            if status == HUD_DUPLICATE and duplicate_ok:
                log.info("HUD has %s final already (409): a duplicate", repo)
                return "duplicate"
            raise HudRefused(status, f"HUD refused the result: {exc}") from exc
        return "forwarded"

    def _check_run(
        self,
        key: JobKey,
        entry: AllowlistEntry,
        data: Mapping[str, Any],
        change: Plan,
        started_at: float | None,
        now: float,
    ) -> int | str | None:
        """Create or complete the job's upstream check run (L3/L4), after the commit. A check
        run belongs to a pull request: one from `pull_request`, or a push of its
        `ciflow/trunk/<pr>` tag; a branch push or a deleted ref gets none. `now`: when this
        callback arrived (a starting job's `started_at`)."""
        if entry.level not in ("L3", "L4"):
            return None
        job = _job_of(key, data, self.config.upstream_repo)
        on_pr = bool(job["head"] and job["pr_number"])
        if entry.level == "L3" and on_pr:
            # What a later `ciflow/crcr/<device>` label needs to create this job's check run.
            self.state.remember_job(job["head"], key.repo, {**job, "status": change.state})
        if self.adapter is None:
            return None
        wanted = on_pr and (
            entry.wants_check_run(_labels(data))
            or (entry.level == "L3" and self.state.check_run_wanted(job["head"], key.repo))
        )
        if wanted and self._demoted(key.repo, entry.level, started_at, now):
            wanted = False
        done = change.state != IN_PROGRESS
        if done and not job["head"]:
            return None
        if not (wanted or done):
            return None
        try:
            # A completion looks for a check run even unwanted: one may exist from earlier.
            return self._ensure_check_run(job, key.repo, create=wanted, complete_existing=done)
        except (RelayError, GitHubUnavailable) as exc:
            log.warning("check run %s on %s: %s", job["name"], job["upstream"], exc)
            return f"failed: {exc}"

    def _ensure_check_run(
        self, job: Mapping[str, Any], repo: str, create: bool, complete_existing: bool
    ) -> int | str | None:
        """The job's check run: created here if nobody has (and `create`), completed if the
        job is done. Called after the job's state is committed, so whichever of a callback
        and a label creates the check run, a completion is never missed (crcr_state's doc).
        Returns the check run id, "pending" when another creator holds the claim, or None."""
        assert self.adapter is not None
        redis_key = str(job["key"])
        slot = self.state.claim_check_run(redis_key, self.clock())
        if slot.outcome == "exists":
            if complete_existing and slot.state not in ("", IN_PROGRESS):
                self._complete(job, slot.check_run_id, slot.conclusion)
            return int(slot.check_run_id)
        if slot.outcome == "busy":
            return "pending"  # the creator completes it if this job is done by then
        if slot.outcome != "claimed":
            return None
        if not create:
            self.state.release_check_run(redis_key)
            return None
        done = slot.state not in ("", IN_PROGRESS)
        adapter = self.adapter
        try:
            check_id = self._github(
                f"check run {job['name']} on {job['upstream']}",
                lambda: adapter.create_check_run(
                    job["upstream"],
                    job["head"],
                    job["name"],
                    job["external_id"],
                    "completed" if done else "in_progress",
                    conclusion=(slot.conclusion or "neutral") if done else None,
                    details_url=job.get("url") or None,
                ),
            )
        except BaseException:
            self.state.release_check_run(redis_key)
            raise
        now = self.state.set_check_run(redis_key, str(check_id))
        state = now.get("state", slot.state)
        if not done and state not in ("", IN_PROGRESS):
            # The job completed while its check run was being created: its callback found
            # the claim held and left the completion to us.
            try:
                self._complete(job, str(check_id), now.get("conclusion", ""))
            except (RelayError, GitHubUnavailable) as exc:
                log.warning("check run %s on %s: %s", job["name"], job["upstream"], exc)
        if job.get("pr_number"):
            self.state.remember_job(
                job["head"], repo, {**job, "status": state, "check_run_id": str(check_id)}
            )
        return check_id

    def _demoted(
        self, repo: str, level: str, started_at: float | None, now: float | None = None
    ) -> bool:
        """Whether a new check run for `repo` is held back by its demotion. `now`: when the
        request asking arrived, the time a demotion it is the first to see began (so the job
        whose own callback sees it first is held back too, as it is by the reference)."""
        if self.demotions is None:
            return False
        held = self.demotions.suppressed(repo, level, started_at, seen_at=now)
        if held:
            log.info("%s is being demoted (crcr-demotion PR open): no new check run", repo)
        return held

    def _complete(self, job: Mapping[str, Any], check_id: str, conclusion: str) -> None:
        adapter = self.adapter
        assert adapter is not None
        self._github(
            f"check run {check_id} on {job['upstream']}",
            lambda: adapter.update_check_run(
                job["upstream"],
                int(check_id),
                status="completed",
                conclusion=conclusion or "neutral",
            ),
        )

    def _github(self, what: str, call: Callable[[], T]) -> T:
        """One check-run call under the publishing retry policy (408, 429, 5xx and network
        errors again, honoring Retry-After, up to the cap); GitHubUnavailable after that."""
        try:
            value, _attempts = retry.run(
                call, what=what, policy=self.retry_policy, sleep=self.sleep
            )
        except retry.RetriesExhausted as exc:
            raise GitHubUnavailable(str(exc)) from exc
        return value

    def label_added(self, payload: Mapping[str, Any]) -> list[int]:
        """`pull_request` `labeled` `ciflow/crcr/<device>`: the device's L3 repos want check
        runs on this head sha from now on; jobs that already reported get theirs now."""
        label = str(_mapping(payload.get("label")).get("name", ""))
        device = label.removeprefix("ciflow/crcr/")
        pr = _mapping(payload.get("pull_request"))
        head = str(_mapping(pr.get("head")).get("sha") or "")
        if not head or self.allowlist is None:
            return []
        created: list[int] = []
        for entry in self.allowlist:
            if entry.level != "L3" or entry.device != device:
                continue
            if not entry.takes_part("pull_request"):
                continue
            # Flag first: a callback committed after this sees it and creates its own.
            self.state.mark_check_run_wanted(head, entry.repo)
            if self._demoted(entry.repo, entry.level, None):
                continue
            for job in self.state.jobs(head, entry.repo):
                if job.get("check_run_id") or self.adapter is None:
                    continue
                check_id = self._ensure_check_run(
                    job, entry.repo, create=True, complete_existing=False
                )
                if isinstance(check_id, int):
                    created.append(check_id)
        return created

    def rerequested(self, event_name: str, payload: Mapping[str, Any]) -> list[tuple[str, str]]:
        """`check_run` / `check_suite` `rerequested` on one of our check runs: re-run the
        downstream workflow run behind it (failed jobs; a suite: all jobs). Returns
        (repo, run id) re-run."""
        if self.adapter is None or self.allowlist is None:
            return []
        if event_name == "check_run":
            runs: Sequence[Mapping[str, Any]] = [_mapping(payload.get("check_run"))]
        else:
            suite = _mapping(payload.get("check_suite"))
            upstream = str(
                _mapping(payload.get("repository")).get("full_name") or self.config.upstream_repo
            )
            runs = self.adapter.suite_check_runs(upstream, int(suite.get("id") or 0))
        targets = []
        for run in runs:
            parts = str(run.get("name", "")).split("/")
            run_id = str(run.get("external_id") or "").split(":")[0]
            repo = "/".join(parts[1:3])
            if parts[0] != "crcr" or len(parts) < 5 or self.allowlist.get(repo) is None:
                continue
            if not run_id.isdigit():
                log.info("%s: run %r is not a GitHub Actions run", run.get("name"), run_id)
                continue
            if (repo, run_id) not in targets:
                targets.append((repo, run_id))
        for repo, run_id in targets:
            self.adapter.rerun_workflow_run(repo, run_id, failed_only=event_name == "check_run")
        return targets

    def sweep(self) -> int:
        """Time out jobs in progress for over 6 h; report them to HUD and their check runs."""
        now = self.clock()
        swept = self.state.sweep(now)
        for job in swept:
            body = callback_of(job)
            log.warning("job %s timed out after 6 h in progress", job["key"])
            if body is None or self.allowlist is None:
                continue
            repo = job.get("repo", "")
            entry = self.allowlist.get(repo)
            if entry is None or not entry.hud:
                continue
            workflow = dict(body.get("workflow") or {})
            workflow.update(
                status="completed",
                conclusion="timed_out",
                completed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            )
            started = _float(job.get("in_progress_at"))
            execution = round(max(0.0, now - started), 3) if started is not None else None
            try:
                # As the reference's cleanup sends it: no queue_time, in_progress -> now.
                self._forward({**body, "workflow": workflow}, repo, entry, None, execution)
            except (HudDown, HudRefused) as exc:
                log.error("timed-out job %s not reported to HUD: %s", job["key"], exc)
            check_id = job.get("check_run_id")
            if check_id and self.adapter is not None:
                upstream = str(
                    ((body.get("payload") or {}).get("repository") or {}).get("full_name")
                    or self.config.upstream_repo
                )
                complete = partial(
                    self.adapter.update_check_run,
                    upstream,
                    int(check_id),
                    status="completed",
                    conclusion="timed_out",
                )
                try:
                    self._github(f"check run {check_id} on {upstream}", complete)
                except (RelayError, GitHubUnavailable) as exc:
                    log.warning("check run %s: %s", check_id, exc)
        return len(swept)


class HudDown(RelayUnavailable):
    """HUD did not accept a result after its retries (answer 502; the state is unchanged)."""


class HudRefused(RelayError):
    """HUD (or the schema it is checked against first) refused the body: its 4xx goes back
    to the caller, and the state is unchanged so a corrected callback is taken."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def for_hud(callback: Mapping[str, Any]) -> dict[str, Any]:
    """The callback as forwarded: verbatim, except that a missing `workflow.check_run_id`
    gets the callback action's own fallback `{run_id}-{run_attempt}` (HUD keys rows by it and
    answers 400 without it)."""
    workflow = _mapping(callback.get("workflow"))
    if workflow.get("check_run_id") is not None:
        return dict(callback)
    fallback = f"{workflow.get('run_id')}-{workflow.get('run_attempt') or 1}"
    return {**callback, "workflow": {**workflow, "check_run_id": fallback}}


def pr_context(payload: Mapping[str, Any]) -> tuple[int, str]:
    """(pr number, head sha) of an upstream event, as the reference relay reads it: a pull
    request's own; for a push, the sha pushed (`after`) and the PR of a
    `refs/tags/ciflow/trunk/<pr>` tag (0 for any other ref); nothing for a deleted ref (its
    `after` is the null sha, on which GitHub refuses a check run)."""
    pr = _mapping(payload.get("pull_request"))
    number = pr.get("number")
    head = _mapping(pr.get("head")).get("sha")
    if isinstance(number, int) and number > 0 and isinstance(head, str) and head:
        return number, head
    after = payload.get("after")
    if payload.get("deleted") or not isinstance(after, str) or after == NULL_SHA:
        return 0, ""
    found = CIFLOW_TRUNK_REF.search(str(payload.get("ref") or ""))
    return (int(found.group(1)) if found else 0), after


def details_url(repo: str, run_id: str) -> str | None:
    """The check run's Details link, from the verified repository and a GitHub Actions run
    id (digits); None for another CI's run id (a Buildkite build UUID): never the caller's
    own `workflow.url`, which nothing verifies."""
    return f"https://github.com/{repo}/actions/runs/{run_id}" if run_id.isdigit() else None


def _job_of(key: JobKey, data: Mapping[str, Any], upstream_repo: str) -> dict[str, Any]:
    """Where a job's upstream check run goes, and what it says."""
    payload = _mapping(data.get("payload"))
    workflow = data["workflow"]
    number, head = pr_context(payload)
    return {
        "key": key.redis_key,
        "name": f"crcr/{key.repo}/{workflow['name']}/{key.job_name}",
        "upstream": str(_mapping(payload.get("repository")).get("full_name") or upstream_repo),
        "head": head,
        "pr_number": number,
        "external_id": f"{key.run_id}:{number}",
        "url": details_url(key.repo, key.run_id) or "",
        "conclusion": checked_conclusion(workflow),
    }


def _check_run_conclusion(workflow: Mapping[str, Any], repo: str) -> str:
    """The conclusion the job's check run shows: the callback's, except that a `success`
    whose counts and listed tests disagree is `neutral` (fail closed,
    `dashboard_export.evidence.callback_gaps`). HUD gets the callback as it came."""
    conclusion = checked_conclusion(workflow)
    if conclusion != str(workflow.get("conclusion") or ""):
        gaps = "; ".join(callback_gaps(workflow))
        log.warning("%s reported success, its check run is neutral: %s", repo, gaps)
    return conclusion


def _labels(data: Mapping[str, Any]) -> tuple[str, ...]:
    pr = _mapping(_mapping(data.get("payload")).get("pull_request"))
    return tuple(str(_mapping(lbl).get("name", "")) for lbl in _list(pr.get("labels")))


def _refusal_status(exc: Exception) -> int:
    """HUD's own 4xx when it answered one; 400 when the body was refused before sending."""
    from dashboard_export import PublishRefused

    return exc.status if isinstance(exc, PublishRefused) else 400


def default_hud_publisher(config: RelayConfig) -> HudPublisher | None:
    """dashboard_export's HUD publisher bound to the configured URL and bot key, if any."""
    if not (config.hud_url and config.hud_bot_key):
        return None
    from dashboard_export.publish import publish_hud

    url, key = config.hud_url, config.hud_bot_key
    return lambda envelope: publish_hud(envelope, url, key)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
