"""Old sources through GitHub's contents API and compare patches as the diff, from the intake
to the plan: in-process against the local GitHub REST server, and on real processes
(`spyre-ci serve`, `spyre-ci worker --intake`, Redis, the local GitHub server)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import selector
from contracts.event import ChangedFile, TriggerEvent
from relay.changes import complete_files
from relay.github import GitHubAdapter
from tests.e2e.test_distributed import listening, post_delivery, services  # noqa: F401
from tests.servers.github_api import GitHubAPIServer, github_api  # noqa: F401 - a fixture
from tests.testing.paths import TINY_SPEC
from tests.testing.processes import free_port
from tests.testing.waiting import wait_for
from workflows.drivers.intake_bridge import request_for_event
from workflows.run.pipeline import load_inventory
from workflows.run.planning import change_set, plan_change, plan_config
from workflows.settings import Settings
from workflows.stores.sources import GitHubSources, github_sources, with_old_sources

REPO = "pytorch/pytorch"
BASE = "0e5bc7d4a106b7827070c51f385b31b3487c01da"
HEAD = "a04374e4c0bcc55e97a6438afc0d030df21dd703"
# A file whose name names no op: only the enclosing TORCH_IMPL_FUNC does.
CPP = "aten/src/ATen/native/Activation.cpp"
OLD_CPP = """\
#include <ATen/native/SoftMax.h>

namespace at::native {

TORCH_IMPL_FUNC(softmax_cpu_out)
(const Tensor& input, int64_t dim, bool half_to_float, const Tensor& output) {
  TORCH_CHECK(!half_to_float, "softmax with half to float conversion is not supported on CPU");
  if (input.numel() == 0) {
    return;
  }
  auto input_ = input.contiguous();
  int64_t dim_ = maybe_wrap_dim(dim, input_.dim());
  if (input_.dim() == 0) {
    input_ = input_.view(1);
  }
  if (dim_ == input_.dim() - 1) {
    softmax_lastdim_kernel(kCPU, output, input_);
  } else {
    softmax_kernel(kCPU, output, input_, dim_);
  }
}

} // namespace at::native
"""
# `diff -u` style, as GitHub's compare gives it here: nothing after the second @@.
PATCH = """\
@@ -13,7 +13,7 @@
   if (input_.dim() == 0) {
     input_ = input_.view(1);
   }
-  if (dim_ == input_.dim() - 1) {
+  if (dim_ == input_.dim() - 1 && input_.size(dim_) > 1) {
     softmax_lastdim_kernel(kCPU, output, input_);
   } else {
     softmax_kernel(kCPU, output, input_, dim_);"""


def push_event(files: tuple[str, ...] = (CPP,)) -> TriggerEvent:
    return TriggerEvent(
        kind="push",
        delivery_id="d-sources",
        repo=REPO,
        head_sha=HEAD,
        base_sha=BASE,
        ref="refs/heads/main",
        files=tuple(ChangedFile(f, "modified") for f in files),
    )


def serve_github(gh: GitHubAPIServer) -> None:
    gh.add_comparison(REPO, BASE, HEAD, files=[{"filename": CPP, "patch": PATCH}])
    gh.add_file(REPO, BASE, CPP, OLD_CPP)


def adapter(gh: GitHubAPIServer) -> GitHubAdapter:
    return GitHubAdapter(base_url=gh.url, token=gh.token)


def the_fact(plan_json: dict[str, Any]) -> dict[str, Any]:
    (fact,) = [p for p in plan_json["change_facts"]["paths"] if p["path"] == CPP]
    return fact


def test_the_intake_plans_a_kernel_change_by_its_old_source_from_github(
    github_api: GitHubAPIServer,  # noqa: F811
    tiny_inventory: Path,
    tmp_path: Path,
) -> None:
    serve_github(github_api)
    state = tmp_path / "state"
    settings = Settings(state, None, github_url=github_api.url, github_token=github_api.token)
    request = request_for_event(
        complete_files(push_event(), adapter(github_api)),
        tmp_path / "runs",
        tiny_inventory,
        settings=settings,
    )
    assert request.diff_text is not None and request.event.diff_text is None
    inventory = load_inventory(tiny_inventory)

    def plan() -> dict[str, Any]:
        result = plan_change(
            change_set(request),
            inventory,
            selector.History(),
            plan_config(request),
            github=github_sources(settings),  # what the run's context hands the plan
        )
        return result.to_json()

    planned = plan()
    fact = the_fact(planned)
    # The kernel map names the op of TORCH_IMPL_FUNC(softmax_cpu_out) (`_softmax`) first.
    assert fact["located"] == "source" and fact["ops"] == ["_softmax", "softmax"]
    assert "cpp-function softmax_cpu_out" in fact["definitions"]
    assert planned["change_facts"]["decision"] == "targeted"
    assert planned["change_facts"]["completeness"] == "full"
    (asked,) = github_api.find("GET", "/contents/")
    assert asked.query["ref"] == [BASE]
    # Cached on disk: the next plan of the same change asks GitHub nothing.
    assert the_fact(plan())["located"] == "source"
    assert len(github_api.find("GET", "/contents/")) == 1
    cache = state / "github-sources"
    assert len([f for f in cache.glob("*/*") if f.is_file()]) == 1


def test_without_github_or_without_a_base_nothing_is_asked(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    serve_github(github_api)
    assert github_sources(Settings(tmp_path, None, github_url=github_api.url)) is None  # no token
    diff = complete_files(push_event(), adapter(github_api)).diff_text
    change = selector.ChangeSet.from_event(push_event(), diff)
    assert with_old_sources(change).sources == {}  # no GitHub configuration
    bare = selector.ChangeSet.from_diff(diff or "")
    sources = GitHubSources(adapter(github_api), tmp_path / "cache")
    assert with_old_sources(bare, github=sources).sources == {}  # no sha to ask for
    assert github_api.find("GET", "/contents/") == []


def test_github_trouble_means_hunks_and_one_log_line(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = "aten/src/ATen/native/Other.cpp"
    github_api.add_file(REPO, BASE, CPP, OLD_CPP)
    github_api.add_file(REPO, BASE, other, OLD_CPP)
    diff = "".join(
        f"--- a/{p}\n+++ b/{p}\n{PATCH}\n" for p in (CPP, other)
    )  # plain `diff -u` of two files
    change = selector.ChangeSet.from_event(push_event((CPP, other)), diff)
    sources = GitHubSources(adapter(github_api), tmp_path / "cache")
    github_api.fail_next("GET", "/contents/", status=502)
    with caplog.at_level(logging.WARNING, logger="workflows.stores.sources"):
        assert with_old_sources(change, github=sources).sources == {}
    (line,) = [r for r in caplog.records if r.name == "workflows.stores.sources"]
    assert "2 file(s) not fetched" in line.getMessage() and "502" in line.getMessage()
    assert len(github_api.find("GET", "/contents/")) == 1  # GitHub failing: no more asked
    # A failure is not cached: the next change asks again. A bound on files a change asks.
    assert set(with_old_sources(change, github=sources).sources) == {CPP, other}
    bounded = GitHubSources(adapter(github_api), tmp_path / "cache2", max_files=1)
    assert len(with_old_sources(change, github=bounded).sources) == 1


def test_an_installed_file_the_patch_does_not_fit_is_read_from_github(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = "torch/_refs/activation.py"
    base_text = "def softmax(x):\n    return x.exp()\n"
    github_api.add_file(REPO, BASE, path, base_text)
    patch = "@@ -1,2 +1,2 @@\n def softmax(x):\n-    return x.exp()\n+    return x.exp() / 2\n"
    diff = f"--- a/{path}\n+++ b/{path}\n{patch}"
    change = selector.ChangeSet.from_event(push_event((path,)), diff)
    root = tmp_path / "site"
    (root / "torch" / "_refs").mkdir(parents=True)
    installed = root / path
    sources = GitHubSources(adapter(github_api), tmp_path / "cache")
    # The installed release differs from the base commit: the patch does not apply to it.
    installed.write_text("def log_softmax(x):\n    pass\n")
    assert with_old_sources(change, root=root, github=sources).sources == {path: base_text}
    # When it fits, the installed file is used and GitHub is not asked.
    installed.write_text("# installed\n" + base_text)
    asked = len(github_api.find("GET", "/contents/"))
    got = with_old_sources(change, root=root, github=sources).sources
    assert got == {path: "# installed\n" + base_text}
    assert len(github_api.find("GET", "/contents/")) == asked


# -- on real processes -----------------------------------------------------------------------


@pytest.mark.long
def test_a_served_push_is_planned_by_the_old_source_github_gives(
    github_api: GitHubAPIServer,  # noqa: F811
    services: dict[str, Any],  # noqa: F811
) -> None:
    serve_github(github_api)
    # The plan task finds GitHub by the environment, as the intake does.
    services["env"].update(
        SPYRE_CI_GITHUB_URL=github_api.url, SPYRE_CI_GITHUB_TOKEN=github_api.token
    )
    port = free_port()
    services["start"](
        "serve", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"
    )
    services["start"](
        "worker",
        "worker",
        "--concurrency",
        "1",
        "--intake",
        "--inventory",
        str(services["inventory"]),
        "--specs",
        str(TINY_SPEC),
        "--out-root",
        str(services["runs"]),
    )
    wait_for(lambda: listening(port), 60, "the relay to listen")
    payload = {
        "ref": "refs/heads/main",
        "before": BASE,
        "after": HEAD,
        "deleted": False,
        "forced": False,
        "repository": {"full_name": REPO},
        "commits": [{"message": "softmax: size-1 last dim", "modified": [CPP]}],
    }
    status, body = post_delivery(port, "sources-e2e-1", payload)
    assert status == 202 and "enqueued" in body, body
    runs: Path = services["runs"]
    plan_file = wait_for(lambda: next(iter(runs.glob("*/plan.json")), None), 300, "plan.json")
    plan_json = json.loads(wait_for(plan_file.read_text, 10, "plan.json's text"))
    fact = the_fact(plan_json)
    # The kernel map names the op of TORCH_IMPL_FUNC(softmax_cpu_out) (`_softmax`) first.
    assert fact["located"] == "source" and fact["ops"] == ["_softmax", "softmax"], fact
    assert "cpp-function softmax_cpu_out" in fact["definitions"]
    assert len(github_api.find("GET", "/compare/")) == 1
    assert [r.query["ref"] for r in github_api.find("GET", "/contents/")] == [[BASE]]
