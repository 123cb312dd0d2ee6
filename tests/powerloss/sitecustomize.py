"""A simulated power loss, for tests: what did each fsync make durable?

How this works. With ``RAFKA_POWERLOSS_ROOT`` (a data directory) and
``RAFKA_POWERLOSS_SHADOW`` (a scratch directory) set, every Python process started with
this directory on ``PYTHONPATH`` imports this module first and wraps ``os.fsync`` and
``os.fdatasync``. Before the real call it notes what the call makes durable, for files and
directories under the root: a file's bytes as they are when the call starts (only the ranges
written through ``os.pwrite``/``os.write`` since the last fsync, for a descriptor opened with
``os.open``; the whole file otherwise) and its size; a directory's entries. After the call
returns the note is appended to the shadow directory, so it is there even if the process is
killed the next instant. A file is known by its inode and the inode's generation (ext4 hands
a freed inode number to the next new file), so a new file never inherits another's bytes.

``build_image`` then makes the directory tree a disk would show after losing power at that
instant, assuming the worst a POSIX file system allows: a directory holds the entries it had at
its last fsync (a name created since is gone, a name removed since is back), and a file holds
the bytes and size of its last fsync (nothing written since; a file never fsynced is empty).
A directory never fsynced is empty. Only regular files and directories are kept.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import stat
import struct
import threading
from pathlib import Path

import msgpack

_FS_IOC_GETVERSION = 0x80087601
_LEN = struct.Struct(">I")


def identity(fd: int) -> str:
    """``<inode>-<generation>`` of an open file or directory (generation -1 where unsupported)."""
    buf = array.array("l", [0])
    try:
        fcntl.ioctl(fd, _FS_IOC_GETVERSION, buf, True)
        gen = int(buf[0])
    except OSError:
        gen = -1
    return f"{os.fstat(fd).st_ino}-{gen}"


def path_identity(path: str | Path) -> str:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0))
    try:
        return identity(fd)
    finally:
        os.close(fd)


def recording_env(root: str | Path, shadow: str | Path, *paths: str | Path) -> dict[str, str]:
    """The environment of a Python process recorded for ``build_image`` (``paths``: more of its
    ``PYTHONPATH``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [here, *map(str, paths), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "RAFKA_POWERLOSS_ROOT": str(root),
            "RAFKA_POWERLOSS_SHADOW": str(shadow)}


class _Recorder:
    """Wraps the ``os`` calls that write, and the two that make writes durable."""

    def __init__(self, root: str, shadow: str) -> None:
        self.root = os.path.realpath(root) + os.sep
        self.shadow = shadow
        self.lock = threading.Lock()
        # fd opened with os.open -> ranges written since its last fsync (from the start: the bytes it had)
        self.dirty: dict[int, list[tuple[int, int]]] = {}
        self.real = {name: getattr(os, name) for name in ("open", "close", "pwrite", "write", "fsync", "fdatasync")}
        self.journals: dict[str, int] = {}

    def install(self) -> None:
        os.open = self.open  # type: ignore[assignment]
        os.close = self.close  # type: ignore[assignment]
        os.pwrite = self.pwrite  # type: ignore[assignment]
        os.write = self.write  # type: ignore[assignment]
        os.fsync = self._durable(self.real["fsync"])  # type: ignore[assignment]
        os.fdatasync = self._durable(self.real["fdatasync"])  # type: ignore[assignment]

    def _under_root(self, fd: int) -> str | None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return path if (path + os.sep).startswith(self.root) else None

    def open(self, path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
        fd = self.real["open"](path, flags, mode, dir_fd=dir_fd)
        st = os.fstat(fd)
        with self.lock:
            self.dirty.pop(fd, None)
            if stat.S_ISREG(st.st_mode) and self._under_root(fd) is not None:
                self.dirty[fd] = [(0, st.st_size)] if st.st_size else []
        return fd

    def close(self, fd: int) -> None:
        with self.lock:
            self.dirty.pop(fd, None)
        self.real["close"](fd)

    def pwrite(self, fd: int, data, offset: int) -> int:  # type: ignore[no-untyped-def]
        n = self.real["pwrite"](fd, data, offset)
        with self.lock:
            ranges = self.dirty.get(fd)
            if ranges is not None:
                ranges.append((offset, n))
        return n

    def write(self, fd: int, data) -> int:  # type: ignore[no-untyped-def]
        ranges = self.dirty.get(fd)
        at = os.lseek(fd, 0, os.SEEK_CUR) if ranges is not None else 0
        n = self.real["write"](fd, data)
        with self.lock:
            ranges = self.dirty.get(fd)
            if ranges is not None:
                ranges.append((at, n))
        return n

    def _durable(self, real):  # type: ignore[no-untyped-def]
        """``real`` (fsync or fdatasync), noting what it makes durable."""

        def call(fd: int) -> None:
            note = self._note(fd)
            real(fd)
            if note is not None:
                self._save(*note)

        return call

    def _note(self, fd: int) -> tuple[str, bytes] | None:
        """What an fsync of ``fd`` starting now makes durable: (identity, serialized note)."""
        path = self._under_root(fd)
        if path is None:
            return None
        st = os.fstat(fd)
        ident = identity(fd)
        if stat.S_ISDIR(st.st_mode):
            entries = {}
            for entry in os.scandir(path):
                try:
                    kind = "d" if entry.is_dir(follow_symlinks=False) else "f" if entry.is_file(follow_symlinks=False) else None
                    if kind is not None:
                        entries[entry.name] = [path_identity(entry.path), kind]
                except OSError:
                    continue  # removed meanwhile
            return "dir-" + ident, json.dumps(entries).encode()
        if not stat.S_ISREG(st.st_mode):
            return None
        with self.lock:  # every range written before now is in ``ranges`` and below ``size``
            ranges = self.dirty.get(fd)
            whole = ranges is None
            if ranges is not None:
                self.dirty[fd] = []
            size = os.fstat(fd).st_size
        with open(f"/proc/self/fd/{fd}", "rb") as f:
            if whole:
                writes = [(0, f.read())]
            else:
                writes = []
                for offset, n in ranges or ():
                    f.seek(offset)
                    writes.append((offset, f.read(n)))
        return "file-" + ident, msgpack.packb([size, writes, whole])

    def _save(self, name: str, note: bytes) -> None:
        if name.startswith("dir-"):
            tmp = os.path.join(self.shadow, f".{name}.{os.getpid()}.{threading.get_ident()}")
            with open(tmp, "wb") as f:
                f.write(note)
            os.replace(tmp, os.path.join(self.shadow, name))  # whole or not at all, even if killed
            return
        with self.lock:
            fd = self.journals.get(name)
            if fd is None:
                fd = self.journals[name] = self.real["open"](os.path.join(self.shadow, name),
                                                             os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.real["write"](fd, _LEN.pack(len(note)) + note)


def _replay(journal: Path) -> bytes:
    """A file's bytes as of its last whole note."""
    data = journal.read_bytes()
    out = bytearray()
    pos = 0
    while pos + 4 <= len(data):
        (n,) = _LEN.unpack_from(data, pos)
        if pos + 4 + n > len(data):
            break  # the process was killed while saving this note: its fsync never returned
        size, writes, whole = msgpack.unpackb(data[pos + 4 : pos + 4 + n])
        if whole:
            out = bytearray()
        for offset, chunk in writes:
            if len(out) < offset:
                out.extend(bytes(offset - len(out)))
            out[offset : offset + len(chunk)] = chunk
        del out[size:]
        out.extend(bytes(size - len(out)))
        pos += 4 + n
    return bytes(out)


def build_image(root_identity: str, shadow: str | Path, out: str | Path) -> None:
    """Write into ``out`` what a power loss now would leave of the root."""
    shadow = Path(shadow)

    def fill(ident: str, target: Path) -> None:
        listing = shadow / f"dir-{ident}"
        if not listing.exists():
            return  # never fsynced: no entry is durable
        for name, (child, kind) in json.loads(listing.read_bytes()).items():
            if kind == "d":
                (target / name).mkdir()
                fill(child, target / name)
            else:
                journal = shadow / f"file-{child}"
                (target / name).write_bytes(_replay(journal) if journal.exists() else b"")

    Path(out).mkdir(parents=True, exist_ok=True)
    fill(root_identity, Path(out))


_root, _shadow = os.environ.get("RAFKA_POWERLOSS_ROOT"), os.environ.get("RAFKA_POWERLOSS_SHADOW")
if _root and _shadow:
    _Recorder(_root, _shadow).install()
