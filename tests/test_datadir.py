"""Claiming a data directory: flock locks and the recorded coordinator partition count."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rafka.datadir import LAYOUT_FILE, DataDirError, check_layout, claim_shard, cluster_id, lock


def test_a_lock_is_exclusive_names_its_holder_and_goes_with_its_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "serve.lock"
    fd = lock(path, "rafka serve")
    with pytest.raises(DataDirError, match=rf"locked by pid {os.getpid()}: another rafka process"):
        lock(path, "rafka serve")  # flock conflicts between two open files, even in one process
    os.close(fd)  # what the kernel does when the holder dies
    os.close(lock(path, "rafka serve"))


def test_the_layout_is_recorded_once_and_another_count_is_refused(tmp_path: Path) -> None:
    check_layout(tmp_path, 64)
    assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == {"coordinator_partitions": 64}
    check_layout(tmp_path, 64)
    with pytest.raises(DataDirError, match="written with --coordinator-partitions 64, not 16"):
        check_layout(tmp_path, 16)
    (tmp_path / LAYOUT_FILE).write_text("{")
    with pytest.raises(DataDirError, match="unreadable"):
        check_layout(tmp_path, 64)


def test_a_shard_claims_every_partition_it_owns_or_none(tmp_path: Path) -> None:
    held = claim_shard(tmp_path, 4, {1, 3}, 1)
    with pytest.raises(DataDirError, match="03.lock is locked"):
        claim_shard(tmp_path, 4, {0, 2, 3}, 0)  # overlaps at partition 3 (another --shards count)
    other = claim_shard(tmp_path, 4, {0, 2}, 0)  # 0 and 2 were released when 3 failed
    for fd in held + other:
        os.close(fd)


def test_a_directory_from_before_the_layout_file_is_refused_when_its_streams_do_not_fit(tmp_path: Path) -> None:
    (tmp_path / "meta" / "40").mkdir(parents=True)  # written with 64 coordinator partitions
    with pytest.raises(DataDirError, match="streams of coordinator partition 40"):
        check_layout(tmp_path, 16)
    assert not (tmp_path / LAYOUT_FILE).exists()
    check_layout(tmp_path, 64)
    assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == {"coordinator_partitions": 64}


def test_a_lock_that_cannot_be_opened_is_a_clear_refusal(tmp_path: Path) -> None:
    (tmp_path / "locks").write_text("a file where the directory should be")
    with pytest.raises(DataDirError, match="cannot open"):
        claim_shard(tmp_path, 4, {0}, 0)


def test_of_processes_recording_the_layout_together_the_first_wins_and_the_others_are_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rafka import datadir

    real_link = os.link

    def another_process_first(src: str, dst: str) -> None:  # it records 64 between our check and our write
        (tmp_path / LAYOUT_FILE).write_text('{"coordinator_partitions": 64}')
        real_link(src, dst)

    monkeypatch.setattr(datadir.os, "link", another_process_first)
    with pytest.raises(DataDirError, match="written with --coordinator-partitions 64, not 16"):
        check_layout(tmp_path, 16)
    assert [p.name for p in tmp_path.iterdir()] == [LAYOUT_FILE], "no temporary file is left"


def test_the_cluster_id_is_recorded_once_and_another_is_refused(tmp_path: Path) -> None:
    """As Kafka's meta.properties: the id a directory was first given (or made for it) stays, and
    a start with another --cluster-id, or with a file that holds none, is refused."""
    made = cluster_id(tmp_path / "a")
    assert cluster_id(tmp_path / "a") == made == cluster_id(tmp_path / "a", made)
    with pytest.raises(DataDirError, match=f"belongs to cluster {made}, not --cluster-id MkU3OEVBNTcwNTJENDM2Qg"):
        cluster_id(tmp_path / "a", "MkU3OEVBNTcwNTJENDM2Qg")
    assert cluster_id(tmp_path / "b", "MkU3OEVBNTcwNTJENDM2Qg") == "MkU3OEVBNTcwNTJENDM2Qg"
    (tmp_path / "b" / "cluster.id").write_bytes(b"\xff\xfe")
    with pytest.raises(DataDirError, match="does not hold a cluster id"):
        cluster_id(tmp_path / "b")
    (tmp_path / "c" / "cluster.id").mkdir(parents=True)
    with pytest.raises(DataDirError, match="does not hold a cluster id"):
        cluster_id(tmp_path / "c")
