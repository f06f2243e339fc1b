"""The newest reference behaviour over real HTTP and a real Redis: HUD's 409 as a duplicate,
push callbacks on `ciflow/trunk/<pr>` tags, allowlist entries with `{events, oncalls}`, L3
demotion while a `crcr-demotion/<repo>` PR is open, one queue_time per run, the per-test
detail and triage verdict reaching HUD's row, and a completion after HUD refused the start."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.allowlist import NIGHTLY, PULL_REQUEST, parse_allowlist
from relay.callback import details_url, pr_context
from relay.events import RelayError
from tests.relay.test_callback import SHA_A, SHA_B, Crcr, body
from tests.relay.test_callback import crcr as crcr  # noqa: F401 - the fixture, used by name

PR = 4242
TRUNK = {
    "ref": f"refs/tags/ciflow/trunk/{PR}",
    "before": SHA_A,
    "after": SHA_B,
    "deleted": False,
    "repository": {"full_name": "pytorch/pytorch"},
}
LABELLED_PR = {
    "repository": {"full_name": "pytorch/pytorch"},
    "pull_request": {
        "number": 12,
        "labels": [{"name": "ciflow/crcr/spyre"}],
        "head": {"sha": SHA_A},
    },
}


def check_run_calls(crcr: Crcr) -> int:
    return len(crcr.github.find("POST", r"/check-runs$")) + len(
        crcr.github.find("PATCH", r"/check-runs/")
    )


# -- pure readings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"pull_request": {"number": 42, "head": {"sha": "abc123"}}}, (42, "abc123")),
        ({"ref": "refs/tags/ciflow/trunk/12345", "after": "def456"}, (12345, "def456")),
        ({"ref": "refs/heads/main", "after": "def456"}, (0, "def456")),
        ({"ref": "refs/tags/ciflow/trunk/42", "after": "0" * 40, "deleted": True}, (0, "")),
        ({"ref": "refs/tags/ciflow/trunk/not-a-pr", "after": "def456"}, (0, "def456")),
        ({"head_sha": SHA_B}, (0, "")),
    ],
)
def test_pr_context_reads_pull_requests_and_trunk_tags(
    payload: dict[str, Any], expected: tuple[int, str]
) -> None:
    assert pr_context(payload) == expected


def test_details_link_is_built_from_the_verified_repo_and_a_numeric_run() -> None:
    assert details_url("acme/x", "123") == "https://github.com/acme/x/actions/runs/123"
    assert details_url("acme/x", "0190a8e1-8d5c-4b6e-9b1e-2f1d3c4b5a69") is None


def test_allowlist_entries_in_every_form() -> None:
    allowlist = parse_allowlist(
        {
            "L1": ["a/plain"],
            "L2": [
                {"b/oncalls": "x, y"},
                {"c/nightly": {"events": ["nightly"], "oncalls": ["n-oncall"]}},
            ],
            "L3": {"spyre": {"d/pr": {"events": ["pull_request"], "oncalls": "p-oncall"}}},
            "L4": [{"e/list": ["z"]}],
        }
    )
    assert allowlist.get("a/plain").events == {PULL_REQUEST, NIGHTLY}  # type: ignore[union-attr]
    assert allowlist.get("b/oncalls").oncalls == ("x", "y")  # type: ignore[union-attr]
    nightly = allowlist.get("c/nightly")
    assert nightly is not None and nightly.events == {NIGHTLY}
    assert nightly.oncalls == ("n-oncall",)
    assert nightly.takes_part("nightly") and nightly.takes_part("periodic")
    assert not nightly.takes_part("pull_request") and not nightly.takes_part("push")
    pr_only = allowlist.get("d/pr")
    assert pr_only is not None and pr_only.device == "spyre" and pr_only.oncalls == ("p-oncall",)
    assert pr_only.takes_part("push") and not pr_only.takes_part("nightly")


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ({"o/r": {"events": ["push"]}}, "not an event"),
        ({"o/r": {"events": []}}, "non-empty list"),
        ({"o/r": {"events": ["nightly", "nightly"]}}, "listed twice"),
        ({"o/r": {"owner": "team"}}, "unknown metadata"),
        ({"o/r": {"oncalls": 3}}, "oncalls"),
    ],
)
def test_bad_entry_metadata_names_the_entry(entry: dict[str, Any], complaint: str) -> None:
    with pytest.raises(RelayError, match=complaint) as raised:
        parse_allowlist({"L2": [entry]}, "allowlist.yml")
    assert "allowlist.yml: L2: o/r" in str(raised.value)


def test_allowlist_with_metadata_is_reloaded_not_refused(crcr: Crcr) -> None:
    allowlist = crcr.http.relay.callbacks.allowlist
    assert allowlist is not None and hasattr(allowlist, "path")
    allowlist.path.write_text(
        allowlist.path.read_text()
        + "  - acme/nightly-only:\n      events: [nightly]\n      oncalls: [n]\n"
    )
    allowlist.check_every = 0
    entry = allowlist.get("acme/nightly-only")
    assert entry is not None and entry.level == "L4" and entry.events == {NIGHTLY}


# -- HUD's write-once 409 ----------------------------------------------------------------------


def test_hud_409_on_completed_is_a_duplicate_and_completes_the_job(crcr: Crcr) -> None:
    crcr.push("d-409")
    started = crcr.callback("tok-l4", body("d-409", "in_progress", job="j", payload=TRUNK))
    assert started.status_code == 200, started.text
    run = crcr.github.check_runs[started.json()["check_run"]]
    crcr.hud.fail_next(1, 409)
    done = crcr.callback(
        "tok-l4", body("d-409", "completed", job="j", conclusion="success", payload=TRUNK)
    )
    assert done.status_code == 200, done.text
    answer = done.json()
    assert (
        answer["ok"] is True and answer["message"] == "duplicate" and answer["hud"] == "duplicate"
    )
    state = crcr.http.relay.client.hget("crcr:state:d-409:acme/l4-backend:9001:1:j", "state")
    assert state == b"COMPLETED"
    assert run["status"] == "completed" and run["conclusion"] == "success"
    assert crcr.http.relay.client.zcard("crcr:in_progress") == 0


def test_hud_write_once_answer_to_a_second_completion_is_a_duplicate(crcr: Crcr) -> None:
    # HUD itself (the local server keeps its write-once rule) refuses a second final write.
    nightly = body(
        SHA_B, "completed", event_type="nightly", conclusion="success", payload={"head_sha": SHA_B}
    )
    first = crcr.callback("tok-spyre", nightly)
    assert first.status_code == 200 and first.json()["hud"] == "forwarded"
    again = crcr.callback("tok-spyre", nightly)
    assert again.status_code == 200, again.text
    assert again.json()["message"] == "duplicate" and again.json()["ok"] is True
    assert [r.status for r in crcr.hud.received] == [200, 409]


def test_a_completion_after_hud_refused_the_start_is_forwarded(crcr: Crcr) -> None:
    crcr.push("d-4xx")
    crcr.hud.fail_next(1, 400)
    assert crcr.callback("tok-spyre", body("d-4xx", "in_progress")).status_code == 400
    crcr.clock.now += 300.0
    done = crcr.callback("tok-spyre", body("d-4xx", "completed", conclusion="failure"))
    assert done.status_code == 200, done.text
    assert done.json()["execution_time"] == pytest.approx(300.0)
    (row,) = crcr.hud.rows
    assert row["status"] == "completed" and row["conclusion"] == "failure"
    assert row["execution_time"] == pytest.approx(300.0)
    assert crcr.callback("tok-spyre", body("d-4xx", "completed")).status_code == 400


# -- push callbacks ---------------------------------------------------------------------------


def test_trunk_tag_push_gets_its_check_run_and_plain_pushes_none(crcr: Crcr) -> None:
    crcr.push("d-push")
    main = {
        "ref": "refs/heads/main",
        "after": SHA_B,
        "repository": {"full_name": "pytorch/pytorch"},
    }
    deleted = {**TRUNK, "after": "0" * 40, "deleted": True}
    for job, payload in (("main", main), ("gone", deleted)):
        for status in ("in_progress", "completed"):
            answer = crcr.callback(
                "tok-l4", body("d-push", status, job=job, payload=payload, conclusion="success")
            )
            assert answer.status_code == 200 and answer.json()["check_run"] is None
    assert check_run_calls(crcr) == 0
    trunk = crcr.callback("tok-l4", body("d-push", "in_progress", job="trunk", payload=TRUNK))
    run = crcr.github.check_runs[trunk.json()["check_run"]]
    assert run["head_sha"] == SHA_B and run["external_id"] == f"9001:{PR}"
    (row,) = [r for r in crcr.hud.rows if r["job_name"] == "trunk"]
    assert row["pr_number"] == PR and row["pytorch_head_sha"] == SHA_B


# -- per-event participation ----------------------------------------------------------------


def test_a_nightly_only_repo_gets_no_dispatch_and_only_nightly_callbacks(crcr: Crcr) -> None:
    allowlist = crcr.http.relay.callbacks.allowlist
    assert allowlist is not None and hasattr(allowlist, "path")
    allowlist.path.write_text(
        allowlist.path.read_text().replace(
            "  - torch-spyre/torch-spyre: oncall-a, oncall-b",
            "  - torch-spyre/torch-spyre:\n"
            "      events: [nightly]\n"
            "      oncalls: oncall-a, oncall-b",
        )
    )
    allowlist.check_every = 0
    payload = {**TRUNK, "ref": "refs/heads/main", "commits": []}
    assert crcr.http.webhook("push", payload, "d-ev").status_code == 202
    assert crcr.http.relay.fanout is not None and crcr.http.relay.fanout.run_once("f") == 3
    assert "torch-spyre/torch-spyre" not in {d["repo"] for d in crcr.github.dispatches}
    ignored = crcr.callback("tok-spyre", body("d-ev", "in_progress"))
    assert ignored.status_code == 200 and ignored.json()["message"] == "ignored"
    assert "pull_request events" in ignored.json()["reason"]
    nightly = body(
        SHA_B, "completed", event_type="nightly", conclusion="success", payload={"head_sha": SHA_B}
    )
    assert crcr.callback("tok-spyre", nightly).json()["hud"] == "forwarded"
    assert [r["event_type"] for r in crcr.hud.rows] == ["nightly"]
    assert crcr.http.relay.client.keys("crcr:state:*") == []


# -- L3 demotion -----------------------------------------------------------------------------


def test_an_open_demotion_pr_holds_back_new_l3_check_runs(crcr: Crcr) -> None:
    demotions = crcr.http.relay.callbacks.demotions
    assert demotions is not None
    demotions.cache_seconds = 0
    demotions.clock = crcr.clock
    crcr.push("d-dem")
    # A job that started before the demotion keeps its check run, and it is completed.
    before = crcr.callback("tok-l3", body("d-dem", "in_progress", job="early", payload=LABELLED_PR))
    early = crcr.github.check_runs[before.json()["check_run"]]
    crcr.clock.now += 10
    pull = crcr.github.add_pull("pytorch/pytorch", "pytorch:crcr-demotion/acme/l3-backend")
    held = crcr.callback("tok-l3", body("d-dem", "in_progress", job="late", payload=LABELLED_PR))
    assert held.status_code == 200 and held.json()["check_run"] is None
    asked = crcr.github.find("GET", r"/repos/pytorch/pytorch/pulls$")[-1]
    assert asked.query["head"] == ["pytorch:crcr-demotion/acme/l3-backend"]
    crcr.clock.now += 10
    crcr.callback(
        "tok-l3", body("d-dem", "completed", job="early", conclusion="success", payload=LABELLED_PR)
    )
    assert early["status"] == "completed" and early["conclusion"] == "success"
    crcr.callback(
        "tok-l3", body("d-dem", "completed", job="late", conclusion="success", payload=LABELLED_PR)
    )
    assert len(crcr.github.check_runs) == 1
    # L4 is never demoted; results still reach HUD stamped L3.
    l4 = crcr.callback("tok-l4", body("d-dem", "in_progress", job="l4", payload=LABELLED_PR))
    assert isinstance(l4.json()["check_run"], int)
    assert {r["downstream_repo_level"] for r in crcr.hud.rows if "l3" in r["downstream_repo"]} == {
        "L3"
    }
    # The PR closed (the backend recovered): check runs again.
    pull["state"] = "closed"
    again = crcr.callback("tok-l3", body("d-dem", "in_progress", job="after", payload=LABELLED_PR))
    assert isinstance(again.json()["check_run"], int)


class TickingClock:
    """Wall time that moves on at every reading, as time.time does between the moment a
    callback arrives and the moment its demotion lookup is recorded."""

    def __init__(self, start: float, step: float = 0.004) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_the_callback_that_first_sees_a_demotion_gets_no_check_run(crcr: Crcr) -> None:
    """The job whose own in_progress is the first to find the demotion PR open started
    milliseconds before the lookup answered; the reference holds a job starting after its
    sweep saw the PR back, and so does the relay: neither start nor completion creates one."""
    crcr.push("d-race")
    clock = TickingClock(crcr.clock.now + 10)
    demotions = crcr.http.relay.callbacks.demotions
    assert demotions is not None
    demotions.cache_seconds = 0
    crcr.http.relay.callbacks.clock = demotions.clock = clock
    crcr.github.add_pull("pytorch/pytorch", "pytorch:crcr-demotion/acme/l3-backend")
    started = crcr.callback("tok-l3", body("d-race", "in_progress", job="j", payload=LABELLED_PR))
    assert started.status_code == 200 and started.json()["check_run"] is None
    done = crcr.callback(
        "tok-l3", body("d-race", "completed", job="j", conclusion="success", payload=LABELLED_PR)
    )
    assert done.status_code == 200 and done.json()["check_run"] is None
    assert crcr.github.check_runs == {}
    assert len(crcr.hud.rows) == 1  # its result still reaches HUD


def test_demotion_lookup_fails_open(crcr: Crcr) -> None:
    demotions = crcr.http.relay.callbacks.demotions
    assert demotions is not None
    demotions.cache_seconds = 0
    crcr.push("d-open")
    crcr.github.fail_next("GET", r"/pulls$", status=502, times=5)
    answer = crcr.callback("tok-l3", body("d-open", "in_progress", payload=LABELLED_PR))
    assert answer.status_code == 200 and isinstance(answer.json()["check_run"], int)


def test_demotion_answers_are_cached(crcr: Crcr) -> None:
    crcr.push("d-cache")
    for job in ("a", "b", "c"):
        crcr.callback("tok-l3", body("d-cache", "in_progress", job=job, payload=LABELLED_PR))
    assert len(crcr.github.find("GET", r"/pulls$")) == 1


# -- queue_time, per-test detail, triage verdict ---------------------------------------------


def test_queue_time_is_reported_by_a_runs_first_job_only(crcr: Crcr) -> None:
    crcr.push("d-qt")
    crcr.clock.now += 30.0
    first = crcr.callback("tok-spyre", body("d-qt", "in_progress", job="build"))
    crcr.clock.now += 300.0
    later = crcr.callback("tok-spyre", body("d-qt", "in_progress", job="test"))
    other_run = crcr.callback("tok-spyre", body("d-qt", "in_progress", job="test", run_id="9002"))
    assert first.json()["queue_time"] == pytest.approx(30.0)
    assert later.json()["queue_time"] is None
    assert other_run.json()["queue_time"] == pytest.approx(330.0)
    rows = {(r["run_id"], r["job_name"]): r["queue_time"] for r in crcr.hud.rows}
    assert rows == {
        ("9001", "build"): pytest.approx(30.0),
        ("9001", "test"): None,
        ("9002", "test"): pytest.approx(330.0),
    }


def test_failed_tests_detail_and_triage_verdict_reach_hud(crcr: Crcr) -> None:
    crcr.push("d-detail")
    crcr.callback("tok-spyre", body("d-detail", "in_progress"))
    done = body("d-detail", "completed", conclusion="failure")
    detail = [
        {"name": f"test_{i}", "classname": "TestOps", "message": "x" * 900, "duration": 1.5}
        for i in range(60)
    ]
    done["workflow"]["failed_tests_detail"] = detail
    done["workflow"]["triage_verdict"] = {
        "schema_version": 1,
        "category": "upstream",
        "confidence": "high",
        "summary": "a change upstream",
        "suspected_upstream": {"pr": 12, "commit": SHA_A[:12]},
    }
    answer = crcr.callback("tok-spyre", done)
    assert answer.status_code == 200, answer.text
    (row,) = crcr.hud.rows
    stored = json.loads(row["failed_tests_json"])
    assert len(stored) == 50 and stored[0] == {
        "name": "test_0",
        "classname": "TestOps",
        "message": "x" * 500,
        "duration": 1.5,
    }
    verdict = json.loads(row["triage_verdict_json"])
    assert verdict["category"] == "upstream" and verdict["suspected_upstream"]["pr"] == 12


# -- publishing that survives GitHub and HUD: the one retry policy, failing closed -------------


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_check_runs_follow_the_publishing_retry_policy(crcr: Crcr) -> None:
    sleeps = Sleeps()
    crcr.http.relay.callbacks.sleep = sleeps
    crcr.push("d-429")
    crcr.github.fail_next("POST", r"/check-runs$", status=429, headers={"Retry-After": "1"})
    started = crcr.callback("tok-l4", body("d-429", "in_progress", job="j", payload=TRUNK))
    run = crcr.github.check_runs[started.json()["check_run"]]
    assert len(crcr.github.find("POST", r"/check-runs$")) == 2 and len(crcr.github.check_runs) == 1
    crcr.github.fail_next("PATCH", r"/check-runs/", status=503)
    done = crcr.callback(
        "tok-l4", body("d-429", "completed", job="j", conclusion="success", payload=TRUNK)
    )
    assert done.status_code == 200 and run["conclusion"] == "success"
    assert len(sleeps) == 2 and 1.0 <= sleeps[0] <= 1.25 and 1.0 <= sleeps[1] <= 1.25
    # A refusal is not retried, and it fails no callback.
    crcr.github.fail_next("POST", r"/check-runs$", status=422)
    refused = crcr.callback("tok-l4", body("d-429", "in_progress", job="k", payload=TRUNK))
    assert refused.status_code == 200 and refused.json()["check_run"].startswith("failed: ")
    assert len(sleeps) == 2


def test_a_success_whose_counts_disagree_completes_its_check_run_neutral(crcr: Crcr) -> None:
    crcr.push("d-odd")
    started = crcr.callback("tok-l4", body("d-odd", "in_progress", job="j", payload=TRUNK))
    run = crcr.github.check_runs[started.json()["check_run"]]
    done = body("d-odd", "completed", job="j", conclusion="success", payload=TRUNK)
    done["workflow"]["test_results"] = {"passed": 10, "failed": 0, "skipped": 0, "total": 12}
    assert crcr.callback("tok-l4", done).status_code == 200
    assert run["status"] == "completed" and run["conclusion"] == "neutral"
    # HUD gets the callback as it came: its row is HUD's own derivation.
    [row] = [r for r in crcr.hud.rows if r["job_name"] == "j"]
    assert row["conclusion"] == "success"
