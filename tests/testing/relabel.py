"""Relabelled copies of a real torch wheel: the builds of a simulated upstream PyTorch.

`relabel_wheel` gives a wheel a new version and git sha (the lines spyre-ci reads from
`torch/version.py` without importing it, the `.dist-info` folder, METADATA, RECORD and the
file name) and can replace, add or remove files in it. It is fast enough for a benchmark:
the zip is written by hand and every unchanged member's compressed bytes are copied as they
are (no inflate, no deflate), with their RECORD lines taken from the source's RECORD.

`truncate_copy` makes a cut-short copy of a file (a wheel whose download broke off).

Standard library only; torch is never imported.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

_LOCAL = struct.Struct("<4s5H3L2H")  # local file header, without name and extra
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # central directory entry, without name/extra/comment
_END = struct.Struct("<4s4H2LH")  # end of central directory record
_LOCAL_SIG, _CENTRAL_SIG, _END_SIG = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
_UTF8_FLAG = 0x800
_DESCRIPTOR_FLAG = 0x08  # sizes and CRC after the data: cleared, the header carries them
_ZIP32_MAX = 0xFFFFFFFF
_COPY_CHUNK = 1024 * 1024
_VERSION_LINE = re.compile(r"^__version__ = .*$", re.MULTILINE)
_GIT_LINE = re.compile(r"^git_version = .*$", re.MULTILINE)
_LABEL = re.compile(r"[A-Za-z0-9.+!_]+")


def relabel_wheel(
    source: Path,
    out_dir: Path,
    *,
    version: str,
    git_sha: str,
    edits: Mapping[str, str | None] | None = None,
) -> Path:
    """Write `{name}-{version}-{tags}.whl` into `out_dir` from the wheel `source`; returns it.

    `torch/version.py` gets `__version__ = '{version}'` and `git_version = '{git_sha}'`
    (its other lines kept); each path of `edits` gets the given text (None removes it, a
    new path is added; applied before the version lines are set); the `.dist-info` folder
    becomes `{name}-{version}.dist-info` with METADATA's `Version:` set; RECORD is rebuilt.
    The file appears whole or not at all (written aside, then renamed).
    """
    edits = dict(edits or {})
    for label in (version, git_sha):
        if not _LABEL.fullmatch(label):
            raise ValueError(f"not a version or sha label: {label!r}")
    name, _old_version, tags = _split_wheel_name(Path(source).name)
    target = Path(out_dir) / f"{name}-{version}-{tags}.whl"
    new_info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(source) as archive, open(source, "rb") as raw:
        members = archive.infolist()
        old_info = _dist_info(members)
        record_path = f"{old_info}/RECORD"
        if any(_renamed(p, old_info, new_info) == f"{new_info}/RECORD" for p in edits):
            raise ValueError("RECORD is rebuilt from the members; it cannot be edited")
        hashes = _record_hashes(archive.read(record_path).decode())
        texts = _changed_texts(archive, members, old_info, new_info, version, git_sha, edits)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".relabel-", suffix=".whl", dir=out_dir)
        try:
            with os.fdopen(fd, "wb") as out:
                writer = _ZipWriter(out)
                record: list[tuple[str, str, str]] = []
                stamp = archive.getinfo(record_path)
                for info in members:
                    if info.filename == record_path:
                        continue
                    path = _renamed(info.filename, old_info, new_info)
                    if path in texts:
                        data = texts.pop(path)
                        if data is not None:
                            writer.add(path, data, info)
                            record.append((path, _digest(data), str(len(data))))
                        continue
                    writer.copy(raw, info, path)
                    if not info.is_dir():
                        digest, size = hashes.get(info.filename) or _hash_member(archive, info)
                        record.append((path, digest, size))
                for path, data in texts.items():  # paths new to the wheel
                    if data is not None:
                        writer.add(path, data, stamp)
                        record.append((path, _digest(data), str(len(data))))
                record.append((f"{new_info}/RECORD", "", ""))
                writer.add(f"{new_info}/RECORD", _record_bytes(record), stamp)
                writer.finish()
            os.chmod(partial, 0o644)  # mkstemp's 0600 would hide it from other users
            os.replace(partial, target)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
    return target


def truncate_copy(src: Path, dst: Path, keep_bytes: int) -> Path:
    """Copy the first `keep_bytes` bytes of `src` to `dst` (a download cut short); returns dst."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        left = keep_bytes
        while left > 0:
            chunk = fin.read(min(left, _COPY_CHUNK))
            if not chunk:
                break
            fout.write(chunk)
            left -= len(chunk)
    return Path(dst)


# -- what changes ---------------------------------------------------------------------------------


def _split_wheel_name(filename: str) -> tuple[str, str, str]:
    """(name, version, tags) of a wheel file name; the tags keep an optional build tag out."""
    stem = filename.removesuffix(".whl")
    parts = stem.split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise ValueError(f"not a wheel file name: {filename!r}")
    return parts[0], parts[1], "-".join(parts[-3:])


def _dist_info(members: list[zipfile.ZipInfo]) -> str:
    """The one top-level `.dist-info` folder of the wheel."""
    found = {m.filename.split("/", 1)[0] for m in members if "/" in m.filename}
    infos = sorted(f for f in found if f.endswith(".dist-info"))
    if len(infos) != 1:
        raise ValueError(f"a wheel has one .dist-info folder, not {infos}")
    return infos[0]


def _renamed(path: str, old_info: str, new_info: str) -> str:
    return new_info + path[len(old_info) :] if path.startswith(old_info + "/") else path


def _changed_texts(
    archive: zipfile.ZipFile,
    members: list[zipfile.ZipInfo],
    old_info: str,
    new_info: str,
    version: str,
    git_sha: str,
    edits: dict[str, str | None],
) -> dict[str, bytes | None]:
    """New bytes of every member that changes, by its path in the new wheel (None: removed)."""
    present = {_renamed(m.filename, old_info, new_info): m.filename for m in members}
    changed: dict[str, bytes | None] = {
        _renamed(p, old_info, new_info): None if t is None else t.encode() for p, t in edits.items()
    }
    version_py = "torch/version.py"
    if changed.get(version_py, b"") is not None and version_py in (changed.keys() | present):
        current = changed.get(version_py)
        text = (archive.read(present[version_py]) if current is None else current).decode()
        for pattern, line in (
            (_VERSION_LINE, f"__version__ = '{version}'"),
            (_GIT_LINE, f"git_version = '{git_sha}'"),
        ):
            text, count = pattern.subn(line, text, count=1)
            if count != 1:
                raise ValueError(f"{version_py} has no {pattern.pattern!r} line")
        changed[version_py] = text.encode()
    metadata = f"{new_info}/METADATA"
    current = changed[metadata] if metadata in changed else archive.read(f"{old_info}/METADATA")
    if current is None:
        raise ValueError("METADATA cannot be removed")
    head, sep, body = current.decode().partition("\n\n")
    head, count = re.subn(r"^Version: .*$", f"Version: {version}", head, count=1, flags=re.M)
    if count != 1:
        raise ValueError("METADATA has no Version: line")
    changed[metadata] = (head + sep + body).encode()
    return changed


# -- RECORD -------------------------------------------------------------------------------------


def _record_hashes(text: str) -> dict[str, tuple[str, str]]:
    """`path -> (hash, size)` of the source's RECORD, for the members copied unchanged."""
    found: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) == 3 and row[1].startswith("sha256="):
            found[row[0]] = (row[1], row[2])
    return found


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _hash_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[str, str]:
    """The RECORD hash of a member the source's RECORD does not list (read and hashed)."""
    return _digest(archive.read(info)), str(info.file_size)


def _record_bytes(rows: list[tuple[str, str, str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


# -- the zip, by hand ---------------------------------------------------------------------------


class _ZipWriter:
    """A zip written member by member: raw copies of source members, or new deflated ones."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._offset = 0
        self._central: list[bytes] = []

    def copy(self, src: BinaryIO, info: zipfile.ZipInfo, name: str) -> None:
        """Copy `info`'s compressed bytes from `src` unchanged, under `name`."""
        src.seek(info.header_offset)
        header = _LOCAL.unpack(src.read(_LOCAL.size))
        if header[0] != _LOCAL_SIG:
            raise ValueError(f"{info.filename}: no local file header at {info.header_offset}")
        src.seek(header[9] + header[10], os.SEEK_CUR)  # past the name and extra field
        self._header(name, info, info.CRC, info.compress_size, info.file_size)
        left = info.compress_size
        while left:
            chunk = src.read(min(left, _COPY_CHUNK))
            if not chunk:
                raise ValueError(f"{info.filename}: the archive ends inside the member")
            self._write(chunk)
            left -= len(chunk)

    def add(self, name: str, data: bytes, like: zipfile.ZipInfo) -> None:
        """A new deflated member with `like`'s time stamp and permissions."""
        packer = zlib.compressobj(6, zlib.DEFLATED, -15)
        packed = packer.compress(data) + packer.flush()
        info = zipfile.ZipInfo(name, like.date_time)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = like.external_attr or (0o644 << 16)
        info.create_system = like.create_system
        info.create_version = like.create_version
        info.extract_version = max(like.extract_version, 20)
        self._header(name, info, zlib.crc32(data), len(packed), len(data))
        self._write(packed)

    def _header(self, name: str, info: zipfile.ZipInfo, crc: int, packed: int, size: int) -> None:
        if max(self._offset, packed, size) >= _ZIP32_MAX:
            raise ValueError(f"{name}: the relabelled wheel would need zip64")
        encoded = name.encode()
        flags = (info.flag_bits & ~_DESCRIPTOR_FLAG) | (_UTF8_FLAG if not name.isascii() else 0)
        dos_time = (
            info.date_time[3] << 11 | info.date_time[4] << 5 | info.date_time[5] // 2,
            (info.date_time[0] - 1980) << 9 | info.date_time[1] << 5 | info.date_time[2],
        )
        common = (info.compress_type, *dos_time, crc, packed, size, len(encoded))
        self._central.append(
            _CENTRAL.pack(
                _CENTRAL_SIG,
                info.create_version | info.create_system << 8,
                info.extract_version,
                flags,
                *common,
                0,  # extra field
                0,  # comment
                0,  # disk
                info.internal_attr,
                info.external_attr,
                self._offset,
            )
            + encoded
        )
        self._write(_LOCAL.pack(_LOCAL_SIG, info.extract_version, flags, *common, 0) + encoded)

    def _write(self, data: bytes) -> None:
        self._out.write(data)
        self._offset += len(data)

    def finish(self) -> None:
        start = self._offset
        for entry in self._central:
            self._write(entry)
        count = len(self._central)
        if count > 0xFFFF:
            raise ValueError("the relabelled wheel would need zip64 (over 65535 members)")
        self._write(_END.pack(_END_SIG, 0, 0, count, count, self._offset - start, start, 0))
