"""Who runs which variant when several test processes share one shard's ids (work stealing).

A claims folder (`--spyre-claims DIR`) holds one file per variant a process has taken, named
by a digest of the id and holding the taker's token (`--spyre-claim-as TOKEN`: one per shard
runner, so a fresh process of the same runner, after a crash, may run what its predecessor
took and did not finish). A process runs a variant only once it holds the claim: the file is
created with `O_EXCL`, so of two processes reaching the same variant exactly one runs it,
and the other moves on without reporting it.

The shard's owner walks its ids front to back and a thief walks the same ids back to front;
they meet in the middle and finish together. Writer: `suites.pytest_plugin`; readers: the
shard runner (`workflows.runner.shard_runner`: what is left for it to run) and the executor that
steals (`workflows.drivers.embedded`). Torch-free, no I/O but the folder.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


def _name(variant_id: str) -> str:
    return hashlib.sha1(variant_id.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Claims:
    """One runner's view of a claims folder: `folder` shared, `token` its own."""

    folder: Path
    token: str

    def take(self, variant_id: str) -> bool:
        """Claim `variant_id` for this token: True when it is ours (new, or ours already)."""
        path = self.folder / _name(variant_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return self.holder(variant_id) == self.token
        try:
            os.write(fd, self.token.encode("utf-8"))
        finally:
            os.close(fd)
        return True

    def holder(self, variant_id: str) -> str | None:
        """The token that holds `variant_id`, or None while nobody does.

        A claim is created empty and written at once; read in between, it is somebody's
        (an empty string, never ours)."""
        try:
            return (self.folder / _name(variant_id)).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def taken_by_others(self, variant_id: str) -> bool:
        holder = self.holder(variant_id)
        return holder is not None and holder != self.token

    def as_options(self) -> list[str]:
        """The pytest options that make a test process claim as this runner."""
        return ["--spyre-claims", str(self.folder), "--spyre-claim-as", self.token]
