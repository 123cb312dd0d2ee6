"""The write-ahead log when the disk fails it: a full disk, a failed fsync, a slow disk (the batch
policy's fsync leaves the loop for its thread), and removing a dropped log only once the drop (and
what remembers it) is durable."""

from __future__ import annotations

import concurrent.futures
import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

from rafka.shard import wal_stream
from rafka.shard.records import Record, RecordType
from rafka.shard.wal import Wal, WalError


class FailingOs:
    """``os`` with the next ``pwrite`` short then ENOSPC, the next ``fdatasync`` EIO, or every
    ``fdatasync`` taking ``delay`` seconds."""

    def __init__(self) -> None:
        self.short_write = False
        self.fail_sync = False
        self.delay = 0.0
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        self.writes += 1
        if self.short_write:
            self.short_write = False
            os.pwrite(fd, bytes(data[:7]), offset)  # the disk fills part-way through the entry
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        time.sleep(self.delay)
        if self.fail_sync:
            self.fail_sync = False
            raise OSError(errno.EIO, "Input/output error")
        os.fdatasync(fd)


def commit(key: tuple[str, str], n: int) -> list[Record]:
    return [Record(RecordType.OFFSET_COMMIT, (*key, "t", 0), {"offset": n})]


def recovered(path: Path) -> list[int]:
    w = Wal(path, set(range(4)), 4, fsync="never")
    out = [r.value["offset"] for records in w.recover() for r in records if r.type == RecordType.OFFSET_COMMIT]
    w.close()
    return out


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> FailingOs:
    fake = FailingOs()
    monkeypatch.setattr(wal_stream, "os", fake)  # the streams' file calls
    return fake


def test_a_full_disk_leaves_no_torn_entry_before_later_appends(tmp_path: Path, failing: FailingOs) -> None:
    w = Wal(tmp_path, set(range(4)), 4, fsync="never")
    w.append(commit(("o", "g"), 1))
    w.commit()
    failing.short_write = True
    w.append(commit(("o", "g"), 2))
    with pytest.raises(WalError):
        w.commit()  # the appends since the last commit are written there
    w.append(commit(("o", "g"), 3))  # space came back
    w.commit()
    w.close()
    assert recovered(tmp_path) == [1, 3], "nothing after the failure is cut off at recovery"


def test_the_ops_between_two_commits_are_written_with_one_call(tmp_path: Path, failing: FailingOs) -> None:
    """Each op's records stay an entry of their own (checksummed: a torn write loses whole ops),
    but a burst of ops reaches the file in one write, at the commit that replies wait for."""
    w = Wal(tmp_path, set(range(4)), 4, fsync="never")
    for n in range(50):
        w.append(commit(("o", "g"), n))
    assert failing.writes == 0
    assert w.commit() is None
    assert failing.writes == 1
    w.close()
    assert recovered(tmp_path) == list(range(50))


@pytest.mark.parametrize("policy", ["always", "batch"])  # batch: a short pass runs in place
def test_a_failed_fsync_is_an_error_and_leaves_the_stream_to_sync(tmp_path: Path, failing: FailingOs,
                                                                  policy: str) -> None:
    w = Wal(tmp_path, set(range(4)), 4, fsync=policy)
    w.append(commit(("o", "g"), 1))
    failing.fail_sync = True
    with pytest.raises(WalError):
        w.commit()
    [stream] = w.streams.values()
    assert stream.dirty, "the stream is still to be synced"
    w.close()


def _groups_in_distinct_streams(w: Wal, n: int) -> list[str]:
    """``n`` group ids whose commits go to ``n`` different meta streams (coordinator partitions)."""
    by_stream: dict[Any, str] = {}
    for g in (f"g{i}" for i in range(1000)):
        by_stream.setdefault(w.stream_key(commit(("o", g), 0)[0]), g)
    return list(by_stream.values())[:n]


def test_a_pass_over_several_streams_fsyncs_them_at_once(tmp_path: Path, failing: FailingOs) -> None:
    """Commits to four groups in four coordinator partitions: four fsyncs that wait for each other
    (a barrier of four) can only all end if they run at the same time."""
    import threading

    meet = threading.Barrier(4, timeout=5)
    real = failing.fdatasync
    failing.fdatasync = lambda fd: (meet.wait(), real(fd))
    w = Wal(tmp_path, set(range(64)), 64, fsync="always")
    for g in _groups_in_distinct_streams(w, 4):
        w.append(commit(("o", g), 1))
    assert w.commit() is None
    assert not any(s.dirty for s in w.streams.values()), "all four durable when the pass returns"
    failing.fdatasync = real
    w.close()


def test_a_failed_fsync_among_several_fails_the_pass_and_leaves_that_stream_to_sync(
        tmp_path: Path, failing: FailingOs) -> None:
    w = Wal(tmp_path, set(range(64)), 64, fsync="always")
    for g in _groups_in_distinct_streams(w, 3):
        w.append(commit(("o", g), 1))
    bad = next(iter(w.streams.values()))
    real = failing.fdatasync

    def fdatasync(fd: int) -> None:
        if fd == bad.fd:
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    failing.fdatasync = fdatasync
    with pytest.raises(WalError):
        w.commit()
    assert bad.dirty and not any(s.dirty for s in w.streams.values() if s is not bad), \
        "the others are durable; the failed one is still to be synced"
    failing.fdatasync = real
    w.close()


def test_a_pass_whose_fsync_threads_cannot_start_syncs_every_stream_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the process's thread limit a pass still makes every stream durable before it returns."""
    import threading

    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.startswith("wal-fsync"):
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    w = Wal(tmp_path, set(range(64)), 64, fsync="always")
    for g in _groups_in_distinct_streams(w, 3):
        w.append(commit(("o", g), 1))
    assert w.commit() is None
    assert not any(s.dirty for s in w.streams.values())
    w.close()


def test_any_failure_of_a_pass_in_place_is_a_wal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard stops and replays on a WalError only: a pass that failed otherwise must not let
    the next commit acknowledge what it left unsynced."""
    w = Wal(tmp_path, set(range(4)), 4, fsync="always")
    w.append(commit(("o", "g"), 1))
    [stream] = w.streams.values()
    monkeypatch.setattr(stream, "sync", lambda: (_ for _ in ()).throw(RuntimeError("not an OSError")))
    with pytest.raises(WalError):
        w.commit()
    monkeypatch.undo()
    w.close()


def test_an_fsync_stuck_on_its_thread_does_not_hold_the_process_exit(tmp_path: Path) -> None:
    """A pass on the fsync threads whose disk never answers: the process still exits (a failing
    disk must not keep a stopping shard alive until it is killed)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import os, threading, sys
        from pathlib import Path
        from rafka.shard import wal as wal_module, wal_stream
        from tests.shard.test_wal_failures import _groups_in_distinct_streams, commit

        stuck = threading.Event()

        class StuckOs:
            def __getattr__(self, name):
                return getattr(os, name)
            def fdatasync(self, fd):
                if threading.current_thread().name.startswith("wal-fsync"):
                    stuck.set()
                    threading.Event().wait()  # never answers
                os.fdatasync(fd)

        wal_stream.os = StuckOs()
        w = wal_module.Wal(Path({str(tmp_path)!r}), set(range(64)), 64, fsync="batch", inline_fsync_under_ms=0)
        for g in _groups_in_distinct_streams(w, 3):
            w.append(commit(("o", g), 1))
        fut = w.commit()
        assert fut is not None and stuck.wait(10) and not fut.done()
        sys.exit(0)
    """)
    root = str(Path(__file__).resolve().parents[2])  # this checkout's rafka
    done = subprocess.run([sys.executable, "-c", script], check=False, timeout=60, capture_output=True, text=True,
                          cwd=root)
    assert done.returncode == 0, done.stderr


def test_a_process_killed_before_the_commit_leaves_a_prefix_of_the_appends(tmp_path: Path) -> None:
    """Entries wait to be written together, but reach the files in the order they were appended:
    a topic delete's TOPIC_DROPPED (which remembers the deletion) is on disk before the partition's
    drop record, whose append removes the log's sealed segments at once. Killed before the
    commit, the files must not hold the drop without the record before it."""
    key = ("o", "t", 0)
    w = Wal(tmp_path, set(range(4)), 4, fsync="never")
    w.append([Record(RecordType.PARTITION_BATCH, key, {"batch": bytes(61), "append_ms": 0, "roll": True})])
    w.commit()
    w.append(commit(("o", "g"), 7))  # another stream, appended before the delete
    w.append([Record(RecordType.TOPIC_DROPPED, ("o", "t", 1), 3), Record(RecordType.PARTITION_TRUNCATE, key, None)])
    # killed here: no commit, no close; the files hold what was written
    after = Wal(tmp_path, set(range(4)), 4, fsync="never")
    kinds = [r.type for records in after.recover() for r in records]
    assert RecordType.TOPIC_DROPPED in kinds and RecordType.OFFSET_COMMIT in kinds
    after.close()


def test_a_dropped_log_is_removed_only_after_its_commit_is_durable(tmp_path: Path) -> None:
    w = Wal(tmp_path, set(range(4)), 4, fsync="batch", inline_fsync_under_ms=0)  # every pass on the syncer thread
    key = ("o", "t", 0)
    batch = Record(RecordType.PARTITION_BATCH, key, {"batch": bytes(61), "append_ms": 0, "roll": True})
    w.append([batch])
    w.commit().result(5)  # type: ignore[union-attr]
    w.append([Record(RecordType.TOPIC_DROPPED, ("o", "t", 1), 3), Record(RecordType.PARTITION_TRUNCATE, key, None)])
    def files() -> list[Path]:
        return list((tmp_path / "logs").rglob("*.wal"))

    assert files(), "not removed before the commit"
    fut = w.commit()
    assert fut is not None
    fut.result(5)
    w.commit()  # the next commit removes what the last one made durable
    assert files() == [] and list((tmp_path / "logs").iterdir()) == []
    w.close()


def test_a_log_dropped_again_waits_for_its_own_drop_to_be_durable(tmp_path: Path) -> None:
    w = Wal(tmp_path, set(range(4)), 4, fsync="batch", linger_ms=300)  # each fsync pass waits 0.3 s
    key = ("o", "t", 0)
    batch = Record(RecordType.PARTITION_BATCH, key, {"batch": bytes(61), "append_ms": 0, "roll": True})
    drop = Record(RecordType.PARTITION_TRUNCATE, key, None)
    w.append([batch])
    w.append([drop])  # the first incarnation deleted ...
    first = w.commit()
    w.append([batch])  # ... a second one written before that drop was durable
    second = w.commit()
    for fut in (first, second):
        fut.result(5)  # type: ignore[union-attr]
    w.append([drop])  # and deleted too
    third = w.commit()  # removes nothing yet: the first drop is durable, but this one is not
    assert third is not None and not third.done()
    assert list((tmp_path / "logs").rglob("*.wal")), "the files stay until the second drop is durable"
    third.result(5)
    w.commit()
    assert not list((tmp_path / "logs").rglob("*.wal"))
    w.close()


def test_a_new_segment_file_and_its_new_directories_are_durable_before_the_commit_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fsynced file whose directory entry was never fsynced can vanish on power loss
    (KAFKA-3968): every directory that gained an entry is fsynced in the pass that makes the
    entries in it durable, deepest first, once."""
    synced: list[Path] = []
    real = wal_stream._fsync_dir
    monkeypatch.setattr(wal_stream, "_fsync_dir", lambda d: (synced.append(d), real(d)))
    w = Wal(tmp_path, set(range(4)), 4, fsync="always", segment_bytes=200)
    w.append(commit(("acme", "g"), 1))
    assert synced == []  # not yet committed
    w.commit()
    stream_dir = next((tmp_path / "meta").iterdir())
    assert synced == [stream_dir, tmp_path / "meta", tmp_path]
    synced.clear()
    w.append(commit(("acme", "g"), 2))
    w.commit()
    assert synced == [], "no new entry: no directory fsync"
    for n in range(3, 12):  # 200-byte segments: this rolls to new files
        w.append(commit(("acme", "g"), n))
        w.commit()
    assert len(list(stream_dir.glob("*.wal"))) > 1 and set(synced) == {stream_dir}
    w.close()


def test_batch_fsyncs_in_place_while_the_disk_is_fast_and_on_its_thread_while_it_is_slow(
        tmp_path: Path, failing: FailingOs) -> None:
    w = Wal(tmp_path, set(range(4)), 4, fsync="batch", inline_fsync_under_ms=50)  # "fast": any real disk here
    [stream] = [w._stream(w.stream_key(r)) for r in commit(("o", "g"), 0)]
    w.append(commit(("o", "g"), 1))
    assert w.commit() is None and not stream.dirty, "a fast disk: durable when commit returns"

    failing.delay = 0.3  # the disk slows down: one pass still runs in place ...
    w.append(commit(("o", "g"), 2))
    assert w.commit() is None and not stream.dirty
    w.append(commit(("o", "g"), 3))
    start = time.perf_counter()
    slow = w.commit()  # ... then the passes go to the thread, and the caller is not held
    assert slow is not None and time.perf_counter() - start < 0.2
    failing.delay = 0.0
    slow.result(5)

    for n in range(4, 30):  # fast again: back in place once the average says so
        w.append(commit(("o", "g"), n))
        fut = w.commit()
        if fut is None:
            break
        fut.result(5)
    assert fut is None
    w.close()
    assert recovered(tmp_path) == list(range(1, n + 1))


def test_a_pass_over_many_streams_goes_to_the_thread(tmp_path: Path) -> None:
    """A produce to many partitions would hold the loop for one fsync per stream."""
    w = Wal(tmp_path, set(range(64)), 64, fsync="batch")
    w.fsync_seconds = 0.0002  # 0.2 ms per stream
    w.append(commit(("o", "g"), 1))
    assert w.commit() is None, "one stream: in place"
    for g in range(30):
        w.append(commit(("o", f"g{g}"), 1))
    assert len(w._written) > 5
    wide = w.commit()
    assert wide is not None, "expected to take over 1 ms: on the thread"
    wide.result(5)
    w.close()


def test_passes_go_to_the_thread_while_commits_come_to_many_groups_at_once(tmp_path: Path) -> None:
    """Many clients committing to their own groups: the loop should take in the next commits while
    one fsync runs. One client again: in place. (Every pass here is expected short: 0.1 ms per
    stream, set before each.)"""
    w = Wal(tmp_path, set(range(64)), 64, fsync="batch")

    def one_pass(groups: list[str], n: int) -> concurrent.futures.Future[None] | None:
        for g in groups:
            w.append(commit(("o", g), n))
        w.fsync_seconds = 0.0001
        fut = w.commit()
        if fut is not None:
            fut.result(5)
        return fut

    groups = _groups_in_distinct_streams(w, 4)
    assert one_pass(groups[:1], 0) is None, "one client: in place"
    on_thread = [one_pass(groups, n) is not None for n in range(1, 6)]  # four clients' commits land together
    assert on_thread[2:] == [True] * 3, f"several groups at once: on the thread ({on_thread})"
    assert one_pass(groups[:1], 6) is not None, "a lone commit right after goes to the thread too"
    in_place = [one_pass(groups[:1], n) is None for n in range(7, 27)]  # one client from now on
    assert True in in_place and all(in_place[in_place.index(True):]), f"back in place ({in_place})"
    w.close()


def test_a_pass_in_place_while_the_threads_runs_waits_for_it(tmp_path: Path, failing: FailingOs) -> None:
    """What was appended before a pass in place may be in the thread's pass still: a reply that
    reflects it (a read after a timer's write) must wait for that pass too."""
    import threading

    gate = threading.Event()
    real = failing.fdatasync
    failing.fdatasync = lambda fd: (threading.current_thread().name != "wal-syncer" or gate.wait(5), real(fd))
    w = Wal(tmp_path, set(range(4)), 4, fsync="batch")
    w.fsync_seconds = 0.01  # the disk has been slow: this pass goes to the thread, which hangs
    w.append(commit(("o", "g"), 1))
    earlier = w.commit()
    assert earlier is not None
    w.fsync_seconds = 0.0  # fast again: the next pass runs in place ...
    w.append(commit(("o", "h"), 2))
    later = w.commit()
    assert later is not None and not later.done(), "... and answers once the thread's pass is durable"
    gate.set()
    later.result(5)
    assert earlier.done()
    assert w.commit() is None, "nothing running: durable at once"
    w.close()
