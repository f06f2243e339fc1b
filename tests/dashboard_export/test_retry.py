"""The one publishing retry policy (dashboard_export.retry), over real HTTP: the HUD upload,
the CRCR callback, GitHub check runs, and `spyre-ci export` keeping what it could not send."""

from __future__ import annotations

import random
import time
from email.utils import formatdate
from pathlib import Path

import pytest

from contracts.errors import Unavailable
from contracts.exit_codes import ExitCode
from dashboard_export import ExportError, PublishRefused, PublishUnavailable
from dashboard_export.crcr import envelope_for
from dashboard_export.github import publish_github
from dashboard_export.model import RunRecord
from dashboard_export.publish import publish_callback, publish_hud
from dashboard_export.retry import (
    CAP_ENV,
    RetriesExhausted,
    RetryPolicy,
    retry_after_s,
    retryable,
    run,
)
from relay.github import GitHubAdapter
from tests.servers.github_api import GitHubAPIServer
from tests.servers.hud import HudServer
from tests.servers.scripted import ScriptedEndpoint
from workflows.cli.main import main

KEY = "hud-test-key"


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


# -- the policy on its own -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "again"),
    [(408, True), (429, True), (500, True), (502, True), (503, True), (599, True)]
    + [(400, False), (401, False), (403, False), (404, False), (409, False), (413, False)]
    + [(422, False), (200, False)],
)
def test_only_408_429_and_5xx_are_worth_another_try(status: int, again: bool) -> None:
    assert retryable(status) is again


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = 1_800_000_000.0
    assert retry_after_s("1") == 1.0 and retry_after_s(" 120 ") == 120.0
    assert retry_after_s(formatdate(now + 3, usegmt=True), now=now) == pytest.approx(3.0)
    assert retry_after_s(formatdate(now - 60, usegmt=True), now=now) == 0.0  # in the past
    for junk in (None, "", "soon", "-5", "1.5e3x"):
        assert retry_after_s(junk) is None


def test_a_refusal_goes_straight_through() -> None:
    calls = []

    def refused() -> None:
        calls.append(1)
        raise PublishRefused("HUD answered 400: bad", 400)

    with pytest.raises(PublishRefused):
        run(refused, what="HUD", sleep=Sleeps())
    assert calls == [1]


def test_retry_after_is_a_floor_and_the_jitter_only_adds() -> None:
    policy = RetryPolicy()
    rng = random.Random(7)
    waits = [policy.delay(1, 2.0, rng) for _ in range(200)]
    assert min(waits) >= 2.0 and max(waits) <= 2.5 and len(set(waits)) > 100
    for attempt, base in ((1, 1.0), (2, 2.0), (3, 4.0)):  # without one: 1, 2, 4, ... s
        assert base <= policy.delay(attempt, None, rng) <= 1.25 * base
    assert policy.delay(9, None, rng) <= policy.max_delay_s * 1.25  # the backoff is capped


def test_the_cap_comes_from_the_environment() -> None:
    assert RetryPolicy.from_env({}).cap_s == 30.0
    assert RetryPolicy.from_env({CAP_ENV: "2.5"}).cap_s == 2.5
    with pytest.raises(ExportError, match=CAP_ENV):
        RetryPolicy.from_env({CAP_ENV: "a while"})


# -- HUD and the callback, against a local server ------------------------------------------


def test_429_with_retry_after_1_then_200(record: RunRecord, hud_server: HudServer) -> None:
    with ScriptedEndpoint([(429, {"Retry-After": "1"})], upstream=hud_server.url) as hud:
        delivery = publish_hud(envelope_for(record), hud.url, KEY, require_https=False)
    assert delivery.status == 200 and delivery.attempts == 2
    [wait] = hud.waits()
    assert wait >= 1.0  # not sooner than the server asked
    assert [a.status for a in hud.arrivals] == [429, 200] and len(hud_server.rows) == 1


def test_retry_after_as_an_http_date(record: RunRecord, hud_server: HudServer) -> None:
    sleeps = Sleeps()
    later = formatdate(time.time() + 10, usegmt=True)
    with ScriptedEndpoint([(503, {"Retry-After": later})], upstream=hud_server.url) as hud:
        delivery = publish_hud(
            envelope_for(record), hud.url, KEY, require_https=False, sleep=sleeps
        )
    assert delivery.attempts == 2
    [wait] = sleeps
    # The date is whole seconds, 9 to 10 s from when it was made; a slow machine eats into it.
    assert 5.0 < wait <= 10.0 * 1.25


def test_503_then_200_backs_off(record: RunRecord, hud_server: HudServer) -> None:
    sleeps = Sleeps()
    with ScriptedEndpoint([(503, {})], upstream=hud_server.url) as hud:
        delivery = publish_hud(
            envelope_for(record), hud.url, KEY, require_https=False, sleep=sleeps
        )
    assert delivery.attempts == 2 and len(hud_server.rows) == 1
    [wait] = sleeps
    assert 1.0 <= wait <= 1.25


def test_400_is_refused_at_once(record: RunRecord) -> None:
    sleeps = Sleeps()
    with (
        ScriptedEndpoint([(400, {"Retry-After": "1"})]) as hud,
        pytest.raises(PublishRefused, match="answered 400") as info,
    ):
        publish_hud(envelope_for(record), hud.url, KEY, require_https=False, sleep=sleeps)
    assert info.value.status == 400 and isinstance(info.value, ExportError)
    assert len(hud.arrivals) == 1 and sleeps == []


def test_429_past_the_cap_is_an_outage(record: RunRecord) -> None:
    with ScriptedEndpoint() as hud:
        hud.keep_answering(429, {"Retry-After": "1"})
        with pytest.raises(RetriesExhausted, match=r"failed after \d attempts; last: 429") as info:
            publish_hud(
                envelope_for(record),
                hud.url,
                KEY,
                require_https=False,
                policy=RetryPolicy(cap_s=2.5),
            )
    outage = info.value
    assert isinstance(outage, PublishUnavailable) and isinstance(outage, Unavailable)
    assert not isinstance(outage, ExportError)
    assert outage.attempts == len(hud.arrivals) >= 2
    assert all(wait >= 1.0 for wait in hud.waits())
    assert "retry cap is 2.5 s" in str(outage)


def test_a_retry_after_past_the_cap_is_not_waited_for(record: RunRecord) -> None:
    sleeps = Sleeps()
    with (
        ScriptedEndpoint([(429, {"Retry-After": "120"})]) as hud,
        pytest.raises(RetriesExhausted, match="asked to retry after 120 s") as info,
    ):
        publish_hud(envelope_for(record), hud.url, KEY, require_https=False, sleep=sleeps)
    assert info.value.attempts == 1 and sleeps == [] and len(hud.arrivals) == 1


def test_the_callback_follows_the_same_policy(record: RunRecord) -> None:
    sleeps = Sleeps()
    script = [(429, {"Retry-After": "1"}), (503, {}), (408, {})]
    with ScriptedEndpoint(script) as relay:
        delivery = publish_callback(record, relay.url, "oidc-token", sleep=sleeps)
        assert delivery.status == 200 and delivery.attempts == 4
        assert sleeps[0] >= 1.0 and len(sleeps) == 3
        relay.script.append((401, {}))
        with pytest.raises(PublishRefused, match="answered 401"):
            publish_callback(record, relay.url, "oidc-token", sleep=sleeps)
    assert [a.status for a in relay.arrivals] == [429, 503, 408, 200, 401]
    assert {a.headers["Authorization"] for a in relay.arrivals} == {"Bearer oidc-token"}


# -- GitHub check runs ------------------------------------------------------------------------


def _adapter(gh: GitHubAPIServer) -> GitHubAdapter:
    return GitHubAdapter(
        base_url=gh.url,
        token=gh.token,
        app_id=int(gh.app_id),
        installation_id=gh.installation_id,
        private_key_pem=gh.private_key_pem,
    )


def test_a_check_run_answered_429_is_created_once_after_retry_after(
    record: RunRecord, github_api: GitHubAPIServer
) -> None:
    github_api.fail_next("POST", r"/check-runs$", status=429, headers={"Retry-After": "1"})
    sleeps = Sleeps()
    result = publish_github(
        record, _adapter(github_api), commit_status=False, check_run=True, sleep=sleeps
    )
    assert result.check_run_created and len(github_api.check_runs) == 1
    assert len(github_api.find("POST", r"/check-runs$")) == 2
    [wait] = sleeps
    assert 1.0 <= wait <= 1.25


def test_a_refused_check_run_is_not_retried(record: RunRecord, github_api: GitHubAPIServer) -> None:
    github_api.fail_next("POST", r"/check-runs$", status=422)
    sleeps = Sleeps()
    with pytest.raises(ExportError, match="422"):
        publish_github(
            record, _adapter(github_api), commit_status=False, check_run=True, sleep=sleeps
        )
    assert sleeps == [] and len(github_api.find("POST", r"/check-runs$")) == 1


def test_github_rate_limiting_past_the_cap_is_an_outage(
    record: RunRecord, github_api: GitHubAPIServer
) -> None:
    github_api.fail_next("POST", r"/statuses/", status=429, times=50, headers={"Retry-After": "1"})
    with pytest.raises(PublishUnavailable, match="GitHub crcr/.*429") as info:
        publish_github(record, _adapter(github_api), policy=RetryPolicy(cap_s=1.5))
    assert not isinstance(info.value, ExportError)
    assert len(github_api.find("POST", r"/statuses/")) == 2


# -- `spyre-ci export`: an outage is exit 3, and nothing is lost --------------------------


def test_export_through_an_outage_exits_3_and_sends_it_later(
    record: RunRecord,
    junit_dir: Path,
    tmp_path: Path,
    hud_server: HudServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record.save(run_dir / "run.json")
    with ScriptedEndpoint(upstream=hud_server.url) as hud:
        hud.keep_answering(429, {"Retry-After": "1"})
        monkeypatch.setenv("SPYRE_CI_HUD_URL", hud.url)
        monkeypatch.setenv("SPYRE_CI_HUD_BOT_KEY", KEY)
        monkeypatch.setenv(CAP_ENV, "1.5")
        argv = ["export", str(run_dir), "--junit", str(junit_dir), "--hud", "--allow-http"]
        assert main(argv) == ExitCode.INFRASTRUCTURE
        assert "429" in capsys.readouterr().err
        # What was not delivered is kept: the envelope is on disk, and the same command
        # sends it once HUD takes it again.
        kept = (run_dir / "hud" / "envelope.json").read_bytes()
        assert hud_server.rows == [] and len(hud.arrivals) == 2
        hud.recover()
        assert main(argv) == ExitCode.OK
    assert len(hud_server.rows) == 1
    assert (run_dir / "hud" / "envelope.json").read_bytes() == kept
    assert "HUD: 200 after 1 attempt(s)" in capsys.readouterr().out
