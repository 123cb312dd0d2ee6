"""Meta-stream compaction: what a restart replays stays bounded by live state when keys come and
go (members join and leave, producers and groups expire), and a crash in the middle of a
compaction replays to the same state."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from rafka.shard.records import Record, RecordType
from rafka.shard.wal import Wal
from rafka.shard.wal_stream import read_entries
from tests.powerloss.sitecustomize import build_image, path_identity, recording_env


def _churn(wal: Wal, rounds: int) -> dict[tuple[int, Any], Any]:
    """Members that join and leave, one offset committed over and over; the state replay must give."""
    for i in range(rounds):
        member = f"member-{i}"
        wal.append([Record(RecordType.CONSUMER_GROUP_MEMBER, ("org", "g", member), {"member_epoch": 1, "pad": "x" * 60}),
                    Record(RecordType.OFFSET_COMMIT, ("org", "g", "t", 0), {"offset": i, "leader_epoch": -1,
                                                                            "metadata": "", "commit_ts": 0})])
        wal.append([Record(RecordType.CONSUMER_GROUP_MEMBER, ("org", "g", member), None)])
    wal.append([Record(RecordType.CONSUMER_GROUP_MEMBER, ("org", "g", "stays"), {"member_epoch": 3})])
    return {(int(RecordType.OFFSET_COMMIT), ("org", "g", "t", 0)): {"offset": rounds - 1, "leader_epoch": -1,
                                                                    "metadata": "", "commit_ts": 0},
            (int(RecordType.CONSUMER_GROUP_MEMBER), ("org", "g", "stays")): {"member_epoch": 3}}


def _replayed(path: Path) -> tuple[dict[tuple[int, Any], Any], int]:
    """The state a restart rebuilds from ``path``, and how many records it reads to get there."""
    wal = Wal(path, {0}, 1, fsync="never", segment_bytes=4096)
    state: dict[tuple[int, Any], Any] = {}
    count = 0
    for records in wal.recover():
        for r in records:
            count += 1
            key = (int(r.type), tuple(r.key))
            if r.value is None:
                state.pop(key, None)
            else:
                state[key] = r.value
    wal.close()
    return state, count


def _compact_now(wal: Wal) -> None:
    stream = wal.streams[("meta", 0)]
    deadline = time.monotonic() + 10
    while getattr(stream, "_compacting", False) and time.monotonic() < deadline:
        time.sleep(0.01)  # the background compaction a roll started
    wal._compact(stream)


def test_compaction_drops_deleted_keys(tmp_path: Path) -> None:
    wal = Wal(tmp_path, {0}, 1, fsync="never", segment_bytes=4096)
    expected = _churn(wal, 2000)
    _compact_now(wal)
    wal.close()
    state, count = _replayed(tmp_path)
    assert state == expected
    active = len(read_entries(max((tmp_path / "meta" / "00").glob("*.wal")))[0])  # not compacted yet
    assert count <= active + len(expected) and active < 100, \
        f"{count} records replayed for {len(expected)} live keys: deleted members pile up"


def test_a_crash_midway_through_a_compaction_replays_to_the_same_state(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Wal, "_compact_async", lambda self, stream: None)  # only the compaction below
    wal = Wal(tmp_path, {0}, 1, fsync="never", segment_bytes=4096)
    members = [("org", "g", f"member-{i}") for i in range(150)]
    for key in members:  # joins in the older segments, leaves in the newer ones
        wal.append([Record(RecordType.CONSUMER_GROUP_MEMBER, key, {"member_epoch": 1, "pad": "x" * 60})])
    for key in members:
        wal.append([Record(RecordType.CONSUMER_GROUP_MEMBER, key, None)])
    stays = Record(RecordType.CONSUMER_GROUP_MEMBER, ("org", "g", "stays"), {"member_epoch": 3})
    wal.append([stays])
    expected = {(int(stays.type), stays.key): stays.value}
    stream = wal.streams[("meta", 0)]
    sealed = [p for p in stream.segments() if int(p.stem) < stream.seq]
    assert len(sealed) >= 3
    unlinked: list[Path] = []

    def crash_after_one(self: Path, missing_ok: bool = False) -> None:
        if unlinked:
            raise OSError("the process died here")
        unlinked.append(self)
        self._real_unlink(missing_ok=missing_ok)  # type: ignore[attr-defined]

    monkeypatch.setattr(Path, "_real_unlink", Path.unlink, raising=False)
    monkeypatch.setattr(Path, "unlink", crash_after_one)
    wal._compact(stream)  # replaces the oldest segment, deletes one more, then "dies"
    monkeypatch.undo()
    assert len(unlinked) == 1 and all(p.exists() for p in sealed if p not in unlinked)
    wal.close()
    assert _replayed(tmp_path)[0] == expected, "no deleted member comes back, no value goes back in time"


def test_a_power_loss_after_compactions_replays_every_acknowledged_record(tmp_path: Path) -> None:
    """Under the simulated power loss of ``tests/powerloss`` (only what was fsynced is left): the
    compacted segment's rename and the deletions after it leave a log that replays to the state of
    the last acknowledged commit."""
    root, shadow, image = tmp_path / "root", tmp_path / "shadow", tmp_path / "image"
    root.mkdir()
    shadow.mkdir()
    script = textwrap.dedent(f"""
        import os, pickle
        from rafka.shard.records import Record, RecordType
        from rafka.shard.wal import Wal
        from tests.shard.test_wal_compaction import _churn, _compact_now

        def commit(wal):
            durable = wal.commit()  # None: durable already (fsynced in place)
            if durable is not None:
                durable.result()

        wal = Wal({str(root)!r}, {{0}}, 1, segment_bytes=4096)
        first = Record(RecordType.OFFSET_COMMIT, ("org", "g", "t", 2), {{"offset": 99}})  # only in compacted segments
        wal.append([first])
        expected = _churn(wal, 1500)
        expected[(int(first.type), first.key)] = first.value
        commit(wal)
        _compact_now(wal)
        last = Record(RecordType.OFFSET_COMMIT, ("org", "g", "t", 1), {{"offset": 7}})
        wal.append([last])
        commit(wal)  # acknowledged: then the power goes
        expected[(int(last.type), last.key)] = last.value
        with open({str(tmp_path / "expected")!r}, "wb") as f:
            pickle.dump(expected, f)
        os._exit(0)
    """)
    env = recording_env(root, shadow, Path(__file__).resolve().parents[2])  # the repository: ``tests`` imports
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    build_image(path_identity(root), shadow, image)
    assert len(list((image / "meta" / "00").glob("*.wal"))) >= 2  # compacted, then rolled on
    expected = pickle.loads((tmp_path / "expected").read_bytes())
    assert _replayed(image)[0] == expected
