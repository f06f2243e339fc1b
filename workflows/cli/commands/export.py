"""`spyre-ci export`: write (or re-write) a run's every output format and publish it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import check_out_dir, checked, read_json
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings

CALLBACK_TOKEN_ENV = "SPYRE_CI_CALLBACK_TOKEN"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a run's CRCR/HUD files and report; publish to HUD, the relay, GitHub",
        description="Read RUN_DIR/run.json (or --record), write callback.json, hud/..., "
        "report.html and report.md (see docs/export.md), then publish what is asked. "
        "Exporting a run again replaces the same files and rows; nothing is duplicated.",
    )
    parser.add_argument(
        "run_dir",
        type=absolute_path,
        nargs="?",
        metavar="RUN_DIR",
        help="a run's output directory holding run.json (and junit/)",
    )
    parser.add_argument(
        "--record",
        type=absolute_path,
        metavar="FILE",
        help="the run record (default RUN_DIR/run.json)",
    )
    parser.add_argument(
        "--out", type=absolute_path, metavar="DIR", help="output directory (default RUN_DIR)"
    )
    parser.add_argument(
        "--junit",
        type=absolute_path,
        metavar="DIR",
        help="JUnit XML for per-test rows (default OUT/junit)",
    )
    parser.add_argument(
        "--status",
        choices=("in_progress", "completed"),
        default="completed",
        help="which state to publish (files always hold the completed one)",
    )
    add_options(
        parser,
        "config",
        help={
            "config": "relay config (YAML) for HUD and GitHub settings; SPYRE_CI_* "
            "environment variables override it"
        },
    )
    parser.add_argument(
        "--hud",
        action="store_true",
        help="POST the envelope to {hud_url}/crcr/results (SPYRE_CI_HUD_URL, SPYRE_CI_HUD_BOT_KEY)",
    )
    parser.add_argument("--hud-url", metavar="URL", help="override the configured HUD URL")
    parser.add_argument(
        "--allow-http", action="store_true", help="accept a plain-http HUD URL (local testing only)"
    )
    parser.add_argument(
        "--callback-url",
        metavar="URL",
        help=f"POST the CRCR callback here (bearer token from {CALLBACK_TOKEN_ENV})",
    )
    parser.add_argument(
        "--github-status",
        action="store_true",
        help="set the commit status crcr/<repo>/<workflow>/<job> upstream",
    )
    parser.add_argument(
        "--github-check-run",
        action="store_true",
        help="create or update the check run of that name (needs a GitHub App)",
    )
    parser.set_defaults(func=checked(export))


def export(args: argparse.Namespace, settings: Settings) -> int:
    from dashboard_export.evidence import with_junit
    from dashboard_export.layout import write_run
    from dashboard_export.model import RunRecord

    if args.run_dir is None and args.record is None:
        raise CommandError("export needs RUN_DIR or --record FILE")
    if args.run_dir is not None and not args.run_dir.is_dir():
        raise CommandError(
            f"{args.run_dir}: "
            + ("is not a directory" if args.run_dir.exists() else "no such directory")
            + " (RUN_DIR holds a run's run.json)"
        )
    record_path = args.record or args.run_dir / "run.json"
    out = args.out or args.run_dir or record_path.parent
    check_out_dir(out)
    if record_path.exists():
        read_json(record_path, "run record")  # a directory, binary or deep file is named here
    # Judged against its JUnit first, so what is published says what the files say.
    record = with_junit(RunRecord.load(record_path), args.junit or Path(out) / "junit")
    written = write_run(record, out, junit_dir=args.junit)
    print(
        f"wrote {len(written)} files under {out} "
        f"({record.effective_conclusion}, {len(record.results)} variants)"
    )
    for line in _publish(args, record, Path(out), settings):
        print(line)
    return ExitCode.OK


def _publish(args: argparse.Namespace, record: Any, out: Path, settings: Settings) -> list[str]:
    lines: list[str] = []
    needs_config = args.hud or args.github_status or args.github_check_run
    config: Any = _config(args.config) if needs_config else None
    if args.hud:
        from dashboard_export.publish import publish_run_to_hud

        url = args.hud_url or config.hud_url
        if not url or not config.hud_bot_key:
            raise CommandError(
                "--hud needs a HUD URL and bot key: set SPYRE_CI_HUD_URL and "
                "SPYRE_CI_HUD_BOT_KEY (or hud_url/hud_bot_key in --config)"
            )
        sent = publish_run_to_hud(
            record, url, config.hud_bot_key, status=args.status, require_https=not args.allow_http
        )
        trimmed = (
            f", {sent.omitted_failed_tests} failed tests left out to fit 2 MB"
            if sent.omitted_failed_tests
            else ""
        )
        lines.append(
            f"HUD: {sent.status} after {sent.attempts} attempt(s), {sent.bytes_sent} bytes{trimmed}"
        )
    if args.callback_url:
        from dashboard_export.publish import publish_callback

        token = settings.callback_token
        if not token:
            raise CommandError(f"--callback-url needs the bearer token in {CALLBACK_TOKEN_ENV}")
        sent = publish_callback(record, args.callback_url, token, status=args.status)
        lines.append(f"callback: {sent.status} after {sent.attempts} attempt(s)")
    if args.github_status or args.github_check_run:
        from dashboard_export.github import publish_github
        from relay.github import GitHubAdapter

        adapter = GitHubAdapter.from_config(config.github)
        result = publish_github(
            record,
            adapter,
            status=args.status,
            commit_status=args.github_status,
            check_run=args.github_check_run,
            state_path=out / "github.json",
        )
        if result.status_state:
            lines.append(f"GitHub status {result.context}: {result.status_state}")
        if result.check_run_id is not None:
            verb = "created" if result.check_run_created else "updated"
            lines.append(f"GitHub check run {result.check_run_id} {verb}")
    return lines


def _config(path: Path | None) -> Any:
    from relay.config import load_config

    return load_config(path)
