"""Claiming a data directory before writing under it.

How this works. As a Kafka broker locks ``<log.dir>/.lock``, a process that writes under
``--data-dir`` first claims what it will write: ``rafka serve`` locks ``serve.lock``, and a
shard locks ``locks/<p>.lock`` for every coordinator partition whose streams it owns. The
locks are ``flock`` locks, which the kernel drops when their process dies however it dies,
so a crashed process never leaves a stale lock; a second broker on the same directory, or a
shard started twice (or under another ``--shards`` count while the first still runs), fails
at once with the holder's pid instead of appending to the same streams.

``layout.json`` records the ``--coordinator-partitions`` the directory was written with:
every record's stream follows from that count, so a process started with another count
would find no topics and few groups where they are, and its first writes would bury them.
It is refused instead; of processes starting together on a new directory, the first one
to link the file into place records its count. A directory written before the file existed
is refused when it has streams of a partition the count does not reach, and otherwise takes
the count it is opened with. ``cluster.id`` holds the cluster id clients see, made the same
way on first start.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from rafka import ids

LAYOUT_FILE = "layout.json"
CLUSTER_ID_FILE = "cluster.id"


class DataDirError(Exception):
    """The data directory is in use by another process, or was written under another layout."""


def lock(path: Path, holder: str) -> int:
    """Take an exclusive ``flock`` on ``path`` (created if missing) for this process's lifetime:
    the open file descriptor it returns holds it. Raise ``DataDirError`` naming the holder's pid
    if another process has it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise DataDirError(f"cannot open {path}: {exc} ({holder} cannot start)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        other = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise DataDirError(f"{path} is locked by pid {other}: another rafka process is using this data "
                               f"directory ({holder} cannot start)") from None
        raise DataDirError(f"cannot lock {path}: {exc} ({holder} cannot start)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def check_layout(data_dir: str | Path, coordinator_partitions: int) -> None:
    """Refuse a data directory written with another coordinator partition count; record the
    count in a directory that has none yet. The file is linked into place, which fails if it
    exists, so of processes starting together the first one's count is recorded and every
    other one is checked against it."""
    root = Path(data_dir)
    path = root / LAYOUT_FILE
    if not path.exists():
        written = _partition_dirs(root)  # a directory from before layout.json: its streams tell
        if written and max(written) >= coordinator_partitions:
            raise DataDirError(f"{root} holds streams of coordinator partition {max(written)}: it was written with "
                               f"more than --coordinator-partitions {coordinator_partitions} (the default is 64); "
                               f"start with the count it was written with")
        _record(root, path, json.dumps({"coordinator_partitions": coordinator_partitions}))
    try:
        recorded = json.loads(path.read_text())["coordinator_partitions"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataDirError(f"{path} is unreadable ({exc!r}): restore it or remove it to adopt "
                           f"--coordinator-partitions {coordinator_partitions}") from None
    if recorded != coordinator_partitions:
        raise DataDirError(f"{root} was written with --coordinator-partitions {recorded}, not "
                           f"{coordinator_partitions}: every topic and group is placed by that count, so start "
                           f"with --coordinator-partitions {recorded}")


def cluster_id(data_dir: str | Path, given: str | None = None) -> str:
    """The data directory's cluster id (Kafka's ``meta.properties`` ``cluster.id``): ``given``
    (``--cluster-id``) or made at random, recorded on first use as ``layout.json`` is, so every
    later start and every process starting together reads the same one. A ``given`` id other
    than the recorded one is refused, as Kafka refuses a ``meta.properties`` of another cluster."""
    root = Path(data_dir)
    path = root / CLUSTER_ID_FILE
    if not path.exists():
        _record(root, path, given or ids.new_cluster_id())
    recorded = recorded_cluster_id(root)
    if recorded is None:
        raise DataDirError(f"{path} does not hold a cluster id: restore it, or remove it to start a new one")
    if given is not None and given != recorded:
        raise DataDirError(f"{root} belongs to cluster {recorded}, not --cluster-id {given}: start with the "
                           f"cluster id it was written with")
    return recorded


def recorded_cluster_id(data_dir: str | Path) -> str | None:
    """The cluster id recorded in the data directory, or None if there is none to read."""
    try:
        text = (Path(data_dir) / CLUSTER_ID_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if ids.is_cluster_id(text) else None


def _record(root: Path, path: Path, text: str) -> None:
    """Write ``path`` durably unless another process has (then leave theirs)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{path.name}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    fsync_dir(root)  # the new entry survives a power loss


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _partition_dirs(root: Path) -> list[int]:
    """The coordinator partitions that have a stream directory under ``root``."""
    found = []
    for area in ("meta", "logs"):
        try:
            found += [int(d.name) for d in (root / area).iterdir() if d.is_dir() and d.name.isdigit()]
        except OSError:
            continue
    return found


def claim_shard(data_dir: str | Path, coordinator_partitions: int, owned: set[int], shard_id: int) -> list[int]:
    """Check the layout and lock each owned coordinator partition; the descriptors hold the locks
    (all released if one is taken)."""
    check_layout(data_dir, coordinator_partitions)
    fds: list[int] = []
    try:
        for p in sorted(owned):
            fds.append(lock(Path(data_dir) / "locks" / f"{p:02d}.lock", f"shard {shard_id}"))
    except DataDirError:
        for fd in fds:
            os.close(fd)
        raise
    return fds
