"""The run browser: `spyre-ci runs pages` writes the runs list, variant pages, flaky variants
and selection quality from History (two real runs of the tiny suite, then a nightly whose
outcomes are recorded through the store), and the relay serves them from runs_dir."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.run_summary import RunSummary
from dashboard_export.browser import RunRow, page_name, render_index
from selector.history import HistoryUpdate, OutcomeRecord
from suites.model import Status
from tests.workflows.run.test_infra_faults import _request
from tests.workflows.run_context import run_context
from workflows.cli.main import main
from workflows.drivers import embedded
from workflows.run.on_build import torch_git_sha
from workflows.stores.history import RunRecord, RunState, SQLiteHistory

NIGHTLY = "c" * 40


@pytest.fixture(scope="module")
def browsed(tiny_inventory: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A state dir: two real tiny runs (nightlies at the installed torch's sha, tested), then
    a nightly at c*40 where one
    variant that passed before fails and one is marked flaky."""
    state = tmp_path_factory.mktemp("browser-state")
    history = SQLiteHistory(state / "history.sqlite3")
    for run_id in ("real-1", "real-2"):
        embedded.run(
            _request(tiny_inventory, state / run_id, run_id),
            run_context(history),
            jobs=1,
            show_progress=False,
        )
    passed = sorted(
        vid for vid, h in history.snapshot().variants.items() if h.recent[-1:] == (Status.PASSED,)
    )
    broken, flaky = passed[0], passed[1]
    after = max(run.updated_at for run in history.list_runs()) + 1.0  # after the real runs
    history.save_run(
        RunRecord(
            "nightly-3",
            RunState.COMPLETED,
            created_at=after,
            updated_at=after,
            summary=RunSummary.from_json(
                {
                    "event": f"nightly {NIGHTLY[:12]}",
                    "kind": "nightly",
                    "head_sha": NIGHTLY,
                    "selected": 10,
                    "holdout": 4,
                    "failed": 1,
                    "new_failures": 1,
                    "metrics": {"miss_rate": 0.25, "false_green": True},
                }
            ),
        )
    )
    history.apply(
        "nightly-3",
        HistoryUpdate(
            outcomes=(
                OutcomeRecord(broken, Status.FAILED, 0.5),
                OutcomeRecord(flaky, Status.FAILED, 0.1),
                OutcomeRecord(flaky, Status.PASSED, 0.1),
            ),
            mark_flaky=(flaky,),
        ),
    )
    (state / "ids").write_text(f"{broken}\n{flaky}\n")
    yield state


def _pages(state: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("SPYRE_CI_STATE_DIR", str(state))
    monkeypatch.delenv("SPYRE_CI_REDIS_URL", raising=False)
    return main(["runs", "pages", "--out", str(out)])


@pytest.mark.long
def test_runs_pages_writes_every_page_from_history(
    browsed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken, flaky = (browsed / "ids").read_text().split()
    out = tmp_path / "runs"
    assert _pages(browsed, out, monkeypatch) == 0

    index = (out / "index.html").read_text()
    # The real runs wrote into the state folder, not the runs folder the relay serves: no
    # link that would answer 404, and where their files are instead.
    assert 'href="/runs/nightly-3"' in index
    for run_id in ("real-1", "real-2"):
        assert f'href="/runs/{run_id}"' not in index
        assert f"<code>{browsed / run_id}</code>, not served here" in index
    # Pages written into the folder that holds them link their reports.
    assert _pages(browsed, browsed, monkeypatch) == 0
    served = (browsed / "index.html").read_text()
    assert all(f'href="/runs/{r}"' in served for r in ("real-1", "real-2", "nightly-3"))
    assert f"/variants/{page_name(broken)}" in index and 'href="/readiness"' in index

    page = (out / "variants" / f"{page_name(broken)}.html").read_text()
    assert "failed" in page and "passed" in page and "real-1" in page
    good = torch_git_sha()  # the real runs' sha: the installed torch's own
    assert "last good: <code>" + good in page
    assert "first bad: <code>" + NIGHTLY in page
    assert f"compare/{good}...{NIGHTLY}" in page

    assert flaky in (out / "flaky.html").read_text()
    assert broken not in (out / "flaky.html").read_text()
    assert (out / "variants" / f"{page_name(flaky)}.html").is_file()

    quality = (out / "quality.html").read_text()
    # Only the nightly had a holdout: 1 of 1 measured runs was false green; 25% of 4 = 1 miss.
    assert "100.0%" in quality and "1 of 1 measured runs" in quality and "25.0%" in quality


def test_runs_pages_needs_a_folder(browsed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPYRE_CI_RUNS_DIR", raising=False)
    monkeypatch.setenv("SPYRE_CI_STATE_DIR", str(browsed))
    assert main(["runs", "pages"]) == 2


def test_pages_escape_what_they_show_and_name_variants_safely() -> None:
    row = RunRow("r-1", "completed", "<script>alert(1)</script>", 0.0, 1, 0, 0)
    html = render_index([row], ["suite::t::../../etc/passwd::<b>"], 0.0)
    assert "<script>alert" not in html and "&lt;script&gt;" in html and "<b>" not in html
    name = page_name("suite::t::../../etc/passwd::<b>")
    assert "/" not in name and "." not in name and name[0].isalnum()
    assert page_name("a::b") != page_name("a__b")


def test_the_relay_serves_the_pages_and_nothing_outside_them(
    browsed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.app import Relay
    from relay.intake import connect
    from tests.testing.relay import RedisProcess, RelayHTTP, base_config

    broken, _ = (browsed / "ids").read_text().split()
    runs = tmp_path / "runs"
    server = RedisProcess(tmp_path)
    server.start()
    service = RelayHTTP(
        Relay(base_config(server.url, runs_dir=str(runs)), client=connect(server.url))
    )
    try:
        missing = service.get("/runs/")
        assert missing.status_code == 404 and "spyre-ci runs pages" in missing.text
        assert _pages(browsed, runs, monkeypatch) == 0
        (tmp_path / "secret.html").write_text("secret")
        for path, text in (
            ("/runs/", "nightly-3"),
            ("/flaky", "Flaky variants"),
            ("/quality", "false-green rate"),
            (f"/variants/{page_name(broken)}", broken),
        ):
            answer = service.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["Content-Type"].startswith("text/html")
            assert text in answer.text
        for bad in (
            "/variants/..",
            "/variants/..%2F..%2Fsecret",
            "/variants/%2E%2E%2Fsecret",
            "/variants/..%2Findex",
            "/variants/a%00b",
            "/variants/index.html",
            "/variants/no-such-page",
            "/variants/../secret",
        ):
            assert service.get(bad).status_code == 404, bad
    finally:
        service.stop()
        server.stop()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH")
def test_every_page_renders_in_headless_chromium(
    browsed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CHROMIUM is not None
    broken, flaky = (browsed / "ids").read_text().split()
    out = tmp_path / "runs"
    assert _pages(browsed, out, monkeypatch) == 0
    # The readiness page the relay serves beside them (not ready: exit 5 is its verdict).
    assert main(["readiness", "--html", str(out / "readiness.html")]) in (0, 5)
    pages = [out / "index.html", out / "flaky.html", out / "quality.html"]
    pages.append(out / "readiness.html")
    pages += [out / "variants" / f"{page_name(v)}.html" for v in (broken, flaky)]
    for page in pages:
        shot = tmp_path / f"{page.stem}.png"
        subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1280,900",
                f"--screenshot={shot}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, page
