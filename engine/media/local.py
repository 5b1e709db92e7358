"""Server-local media files, only under `media_local_root` (spec §3.4, security-critical).

The path is resolved with realpath and must land inside the root; the resolved path is then opened one
component at a time from a descriptor of the root with O_NOFOLLOW, so a symlink or directory swapped in between
the check and the open fails instead of escaping. Every failure has the same message, which never says whether
a path exists.
"""

from __future__ import annotations

import os
import re
import stat

from engine.media.errors import MediaError
from engine.media.sources import EXTENSIONS, MAX_BYTES

NOT_ALLOWED = "local media path is not allowed or not readable"
_PATH_RE = re.compile(r"[A-Za-z0-9_./-]+")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_local(source: str, kind: str, *, allow: bool, root: str) -> bytes:
    """The bytes of a `file://` URL or a path (absolute, or relative to `root`). Blocking: call it off the
    event loop. Raises MediaError(NOT_ALLOWED) for every refusal, including a disabled feature."""
    if not allow or not root:
        raise MediaError(NOT_ALLOWED)
    path = source[len("file://") :] if source[:7].lower() == "file://" else source
    if not _PATH_RE.fullmatch(path) or ".." in path.split("/") or not path.lower().endswith(EXTENSIONS[kind]):
        raise MediaError(NOT_ALLOWED)
    root_real = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root_real, path))  # join keeps an absolute `path` as it is
    if os.path.commonpath([real, root_real]) != root_real or real == root_real:
        raise MediaError(NOT_ALLOWED)
    try:
        return _read_beneath(root_real, os.path.relpath(real, root_real), kind)
    except OSError:
        raise MediaError(NOT_ALLOWED) from None


def _read_beneath(root: str, relative: str, kind: str) -> bytes:
    *dirs, name = relative.split(os.sep)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root itself may be a symlink
    try:
        for part in dirs:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(name, _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb", buffering=0) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise MediaError(NOT_ALLOWED)
        if info.st_size > MAX_BYTES[kind]:  # checked before reading
            raise MediaError(NOT_ALLOWED)
        os.set_blocking(f.fileno(), True)
        data = f.read(info.st_size + 1)
    if len(data) > info.st_size:  # the file grew after fstat
        raise MediaError(NOT_ALLOWED)
    return data
