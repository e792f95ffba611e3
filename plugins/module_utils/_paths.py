# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Files at paths a user names: the check before a file is renamed over one, and a bounded read.

- A destination that exists must be a regular file (or a symlink to one, or a dangling symlink:
  rename(2) replaces the link itself). rename(2) replaces any directory entry that is not a
  directory, so renaming a new file over /dev/null, a FIFO or a socket replaces that device or
  pipe with a plain file (rename(2), "If newpath already exists, it will be atomically replaced").
- A file read is read only when it is a regular file (checked with fstat(2) on the opened
  descriptor, so nothing can be swapped in between), opened with O_NONBLOCK so that a FIFO's
  open(2) does not wait for a writer (fifo(7)), without following a symlink at its last
  component unless asked, and never past a cap: the size stat reports is not trusted (a sparse
  file, /proc), the read stops one byte past the cap and the file is refused.
"""

from __future__ import annotations

import errno
import os
import stat

# A saved tool output (perftest, nccl-tests, infiniband-diags) is read whole up to this and refused
# past it: the iblinkinfo of a few thousand switches is tens of MB, a perftest or nccl-tests log a
# few kB (the same cap as module_utils/_sysroot.py WHOLE_LIMIT and ib_fabric_facts' LOG_LIMIT).
LOG_LIMIT = 64 << 20

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)


class NotRegular(ValueError):
    """A FIFO, socket, device, directory (or a symlink where none is followed) where a file is expected."""


class TooLarge(ValueError):
    """A file longer than the cap of the read."""


def kind(mode: int) -> str:
    """What a file of ``mode`` (st_mode) is, in words."""
    for test, name in ((stat.S_ISREG, 'a regular file'), (stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'),
                       (stat.S_ISSOCK, 'a socket'), (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'),
                       (stat.S_ISLNK, 'a symlink')):
        if test(mode):
            return name
    return 'a file of type %o' % stat.S_IFMT(mode)


def destination_problem(path: str) -> str | None:
    """None when a new regular file may be renamed over ``path`` (absent, a regular file, a symlink
    to a regular file, a dangling symlink); otherwise why not, as a phrase to follow the path
    ("is a FIFO, not a regular file: nothing is written over it")."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return 'cannot be checked (%s): nothing is written over it' % (exc.strerror or exc)
    if stat.S_ISREG(info.st_mode):
        return None
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return 'is a symlink that cannot be followed (%s): nothing is written over it' % (exc.strerror or exc)
        if stat.S_ISREG(target.st_mode):
            return None
        return 'is a symlink to %s, not to a regular file: nothing is written over it' % kind(target.st_mode)
    return 'is %s, not a regular file: nothing is written over it' % kind(info.st_mode)


def open_regular(path: str, follow: bool = False) -> int:
    """A descriptor (int) of the regular file ``path``, opened read-only and non-blocking; NotRegular
    for anything else (a symlink at the last component too, unless ``follow``), OSError as open(2)
    raises it otherwise."""
    flags = _OPEN_FLAGS if follow else _OPEN_FLAGS | getattr(os, 'O_NOFOLLOW', 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        # O_NOFOLLOW on a symlink: ELOOP; a socket: ENXIO (open(2)). Say what it is rather than
        # "Too many levels of symbolic links" or "No such device or address".
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            try:
                mode = (os.stat if follow else os.lstat)(path).st_mode
            except OSError:
                raise exc
            if stat.S_ISLNK(mode):
                raise NotRegular('a symlink (not followed): give the file itself')
            if not stat.S_ISREG(mode):
                raise NotRegular('%s, not a regular file' % kind(mode))
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular('%s, not a regular file' % kind(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular_to_write(path: str, access: int = os.O_WRONLY | os.O_TRUNC, create: bool = False) -> int:
    """A descriptor (int) of the regular file ``path`` opened for writing (``access``: O_WRONLY|O_TRUNC
    as open(path, 'w'), or O_RDWR to read back), non-blocking and without following a symlink at the
    last component; ``create`` makes it when absent. NotRegular for anything else, OSError as open(2)
    raises it otherwise. Below a snapshot or simulated root a symlink there may point out of the root
    and a FIFO would block open(2) for a reader (fifo(7)); sysfs and configfs attributes are regular
    files (S_IFREG, fs/sysfs/file.c, fs/configfs/file.c), so the live root takes the same path."""
    # Looked at before open(2) too: opening a device can act on it (a tape rewinds on close).
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        if not create:
            raise
    else:
        if stat.S_ISLNK(mode):
            raise NotRegular('a symlink, not a regular file: it is not followed')
        if not stat.S_ISREG(mode):
            raise NotRegular('%s, not a regular file' % kind(mode))
    flags = access | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0) | getattr(os, 'O_NOFOLLOW', 0)
    if create:
        flags |= os.O_CREAT
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        # Swapped in since the lstat: a symlink under O_NOFOLLOW gives ELOOP, a FIFO without a reader
        # under O_NONBLOCK|O_WRONLY or a socket ENXIO, a directory EISDIR (open(2)).
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise NotRegular('not a regular file (%s)' % (exc.strerror or exc))
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular('%s, not a regular file' % kind(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd``; TooLarge when there are more."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            return b''.join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise TooLarge('larger than %s' % size_text(limit))


def read_regular(path: str, limit: int, follow: bool = False) -> bytes:
    """Bytes of the regular file ``path``, whole, at most ``limit`` of them. NotRegular or TooLarge
    (both ValueError, saying why), or OSError."""
    fd = open_regular(path, follow)
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def size_text(limit: int) -> str:
    """``limit`` bytes in the unit it is a whole number of (64 MiB, 1 KiB, 100 bytes)."""
    for shift, unit in ((30, 'GiB'), (20, 'MiB'), (10, 'KiB')):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return '%d %s' % (limit >> shift, unit)
    return '%d bytes' % limit
