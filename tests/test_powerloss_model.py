"""The simulated power loss (tests/powerloss) keeps what was fsynced and only that."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.powerloss.sitecustomize import build_image, path_identity, recording_env


def _run(script: str, root: Path, shadow: Path) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=root, env=recording_env(root, shadow),
                   check=True, timeout=60)


def test_an_image_holds_what_was_fsynced_and_nothing_else(tmp_path: Path) -> None:
    root, shadow = tmp_path / "root", tmp_path / "shadow"
    root.mkdir()
    shadow.mkdir()
    _run("""
        import os
        from rafka.datadir import fsync_dir

        def new(name, data):
            fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(fd, data, 0)
            return fd

        a = new("a", b"hello")
        os.fdatasync(a)
        os.pwrite(a, b" world", 5)                 # made durable by a's next fsync
        os.mkdir("sub")
        s = new("sub/s", b"in a directory never fsynced")
        os.fsync(s)
        gone = new("gone", b"deleted after the last directory fsync")
        os.fsync(gone)
        new("empty", b"written, never fsynced")
        with open("layout.tmp", "w") as f:          # a file object, renamed into place
            f.write("whole")
            f.flush()
            os.fsync(f.fileno())
        os.replace("layout.tmp", "layout")
        fsync_dir(".")
        os.unlink("gone")                           # not yet durable: the name comes back
        late = new("late", b"a name the directory never made durable")
        os.fsync(late)
        os.pwrite(a, b"HELLO", 0)
        os.fsync(a)
        os.pwrite(a, b"!", 11)                      # never fsynced: lost
    """, root, shadow)
    out = tmp_path / "image"
    build_image(path_identity(root), shadow, out)
    assert sorted(p.name for p in out.iterdir()) == ["a", "empty", "gone", "layout", "sub"]
    assert (out / "a").read_bytes() == b"HELLO world"
    assert (out / "gone").read_bytes() == b"deleted after the last directory fsync"
    assert (out / "empty").read_bytes() == b""
    assert (out / "layout").read_text() == "whole"
    assert list((out / "sub").iterdir()) == []
