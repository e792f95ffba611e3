# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One root for every hardware read.

Every read of /sys, /proc and the few files under /etc, /usr/src, /lib/modules
that describe a node goes through a :class:`SysRoot`, so the same code runs
against a live node (``/``), a captured snapshot, or a simulated node.

Reads never raise: a missing file is ``None`` (absence is a fact), any other
error is ``None`` plus one warning naming the file, so the facts about the
healthy parts of the node are still returned.

Below any root other than ``/`` the tree is someone else's files (a snapshot
sent along with a ticket), so every read stays below the root and is bounded
(docs/security.md):

- every symlink on the way is followed inside the root: an absolute target is
  re-rooted and ``..`` stops at the root, as ``/..`` is ``/`` on the node (the
  same rule as openat2(2) RESOLVE_IN_ROOT); the host path finally opened holds
  no symlink, and is opened with O_NOFOLLOW;
- only regular files are read: a FIFO or a device is refused after fstat(2),
  and opened with O_NONBLOCK so that a FIFO's open(2) does not wait for a
  writer (fifo(7));
- no read returns more than a cap: the size ``stat`` reports is never trusted
  (sysfs attributes stat as 4096 bytes, procfs files as 0), a read simply stops
  one byte past the cap, and a file over it is refused whole rather than
  judged on a truncated part.

On the live root the kernel resolves paths itself, as it always did; the reads
are bounded and regular-file-only there too (sysfs and procfs attributes are
regular files).
"""

from __future__ import annotations

import errno
import os
import stat

# text(): one read(2) of a sysfs/procfs attribute. sysfs hands out at most one page
# (Documentation/filesystems/sysfs.rst, "show() ... PAGE_SIZE"); /proc/self/limits,
# /proc/modules and the /etc files read as text are a few kB. 1 MiB is ample.
TEXT_LIMIT = 1 << 20
# cached(): whole files - /proc/kallsyms (5-15 MB on distribution kernels with their
# modules loaded) and Module.symvers (1-2 MB). 64 MiB is four times the largest seen and
# keeps a hostile /proc/kallsyms -> /dev/zero, or a 1 GiB file in a snapshot, from
# exhausting the controller's memory.
WHOLE_LIMIT = 64 << 20

# Warnings a module hands to Ansible, each printed on the console: the first WARNINGS_NAMED
# distinct ones, then one line that counts the rest. A snapshot with 20,000 junk files in a
# saved-output directory printed 20,000 warnings (and deduplicating them against a list took
# quadratic time); a real node's read gives a handful.
WARNINGS_NAMED = 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file is expected (never read)."""


class TooLarge(OSError):
    """A file longer than the cap of the read."""


class SysRoot(object):
    """Read-only view of a node's filesystem below ``root``."""

    # A symlink chain longer than this is a loop (Linux uses 40, fs/namei.c MAXSYMLINKS).
    _MAX_LINKS = 40

    def __init__(self, root: str | None = '/') -> None:
        self.root = os.path.abspath(root or '/')
        self.live = self.root == '/'
        # Plain concatenation: a facts run reads thousands of sysfs files (GID
        # tables are 128-255 entries per port) and os.path.join showed in profiles.
        self._prefix = '' if self.live else self.root
        self._resolved: dict[str, str | None] = {}
        # Node path (symlink-free parent + name) -> its link target, '' when it is no
        # link, None when it does not exist: one lstat per path per run.
        self._lstat: dict[str, str | None] = {}
        self._cache: dict[str, bytes | None] = {}
        self._warnings: list[str] = []
        self._warned: set[str] = set()
        self.warnings_dropped = 0

    def path(self, rel: str) -> str:
        """Absolute host path of ``rel`` (a node path such as /sys/class/net).

        Plain concatenation: below a root other than / a symlink in ``rel`` would be
        followed by the host. The read methods below use :meth:`host_path` instead.
        """
        return self._prefix + '/' + rel.lstrip('/')

    def host_path(self, rel: str) -> str:
        """Host path to open for ``rel``: on / the path itself (the kernel resolves it);
        below another root every symlink resolved inside the root. Raises ENOENT when a
        component is missing (or a symlink chain loops)."""
        if self.live:
            return '/' + rel.lstrip('/')
        real = self._resolved_path(rel)
        if real is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), rel)
        return self._prefix + real

    @property
    def warnings(self) -> list[str]:
        """The distinct warnings, the first WARNINGS_NAMED of them, and a line counting the rest."""
        if not self.warnings_dropped:
            return list(self._warnings)
        return self._warnings + ['... and %d more warning(s) like these, not shown' % self.warnings_dropped]

    def warn(self, msg: str) -> None:
        if msg in self._warned:
            return
        self._warned.add(msg)
        if len(self._warnings) < WARNINGS_NAMED:
            self._warnings.append(msg)
        else:
            self.warnings_dropped += 1

    def _report(self, rel: str, exc: BaseException, quiet_errnos: tuple[int, ...] = (errno.ENOENT, errno.ENOTDIR)) -> None:
        if getattr(exc, 'errno', None) not in quiet_errnos:
            self.warn('cannot read %s: %s' % (rel, getattr(exc, 'strerror', None) or exc))

    def _read(self, rel: str, limit: int, how: str = 'whole') -> bytes:
        """Bytes of the regular file ``rel``. ``how``: 'once', one read(2) of at most
        ``limit`` bytes, as a sysfs attribute is read (show() fills the buffer in one go);
        'upto', the first ``limit`` bytes; 'whole', every byte, or TooLarge past ``limit``.
        Raises OSError."""
        flags = _OPEN_FLAGS if self.live else _OPEN_FLAGS | os.O_NOFOLLOW
        fd = os.open(self.host_path(rel), flags)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
            if not stat.S_ISREG(mode):
                raise NotRegularFile(errno.EINVAL, 'not a regular file', rel)
            if how == 'once':
                return os.read(fd, limit)
            # 'whole' reads one byte past the cap, to tell a file of exactly the cap from a longer one.
            want = limit if how == 'upto' else limit + 1
            chunks: list[bytes] = []
            got = 0
            while got < want:
                chunk = os.read(fd, min(1 << 20, want - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            if got > limit:
                raise TooLarge(errno.EFBIG, 'larger than the %d MiB cap of a read' % (limit >> 20), rel)
            return b''.join(chunks)
        finally:
            os.close(fd)

    def text(self, rel: str, quiet: bool = False) -> str | None:
        """Content of a small text file, trailing whitespace removed, or None.

        sysfs attributes end with one newline; some captured trees carry extra
        blank lines (prometheus/procfs fixtures), so all trailing whitespace goes.
        ``quiet`` silences errors that are expected for that file (for example
        EINVAL from the gid_attrs of an unused GID entry); a file that is not a
        regular file is named even then.
        """
        try:
            data = self._read(rel, TEXT_LIMIT, 'once')
        except OSError as exc:
            if not quiet or isinstance(exc, NotRegularFile):
                self._report(rel, exc)
            return None
        return data.decode('utf-8', 'replace').rstrip()

    def binary(self, rel: str, size: int = 4096) -> bytes | None:
        """Up to ``size`` bytes of a binary file (PCI config space), or None."""
        try:
            return self._read(rel, size, 'upto')
        except OSError as exc:
            self._report(rel, exc)
            return None

    def cached(self, rel: str, limit: int = WHOLE_LIMIT) -> bytes | None:
        """Whole content (bytes) of a file read at most once per run, or None (also when
        it is longer than ``limit``: a verdict on part of a file could be wrong)."""
        if rel not in self._cache:
            try:
                self._cache[rel] = self._read(rel, limit, 'whole')
            except OSError as exc:
                self._report(rel, exc)
                self._cache[rel] = None
        return self._cache[rel]

    def listdir(self, rel: str) -> list[str]:
        """Sorted entries of a directory; [] when it does not exist."""
        try:
            return sorted(os.listdir(self.host_path(rel)))
        except (IOError, OSError) as exc:
            self._report(rel, exc)
            return []

    def exists(self, rel: str) -> bool:
        if self.live:
            return os.path.exists(self.path(rel))
        return self._resolved_path(rel) is not None

    def isdir(self, rel: str) -> bool:
        if self.live:
            return os.path.isdir(self.path(rel))
        real = self._resolved_path(rel)
        return real is not None and os.path.isdir(self._prefix + real)

    def link_target(self, rel: str) -> str | None:
        """Node path a symlink names (its target, relative ones made absolute from the
        link's directory and normalised inside the root), or None when ``rel`` is no
        symlink. The target is not followed: a link to /dev/null masks a file
        (modules-load.d(5)) and the snapshot holds no /dev."""
        parent, _sep, name = ('/' + rel.strip('/')).rpartition('/')
        if self.live:
            real_parent = parent or '/'
        else:
            resolved = self._resolved_path(parent or '/')
            if resolved is None:
                return None
            real_parent = resolved
        try:
            target = os.readlink(self._prefix + real_parent.rstrip('/') + '/' + name)
        except (IOError, OSError):
            return None
        return normalise_path(target if target.startswith('/') else real_parent + '/' + target)

    def resolve(self, rel: str) -> str | None:
        """Node path that ``rel`` points to after following every symlink.

        Symlinks are followed inside the root: an absolute target (as a
        snapshot tarball may hold) is re-rooted instead of escaping to the
        controller's own /sys, and ``..`` never climbs above the root.
        Returns None when a component is missing.
        """
        return self._resolved_path(rel)

    def _resolved_path(self, rel: str) -> str | None:
        # resolve() without the bookkeeping of subclasses (_capture.RecordingSysRoot
        # notes what a reader asked to resolve; the reads below resolve as a means).
        if rel in self._resolved:
            return self._resolved[rel]
        result = self._resolve(rel)
        self._resolved[rel] = result
        return result

    def _kind(self, candidate: str) -> str | None:
        """'' for a path that is no symlink, its target for one, None when it is missing."""
        if candidate not in self._lstat:
            host = self._prefix + candidate
            try:
                info = os.lstat(host)
            except OSError:
                self._lstat[candidate] = None
            else:
                self._lstat[candidate] = os.readlink(host) if stat.S_ISLNK(info.st_mode) else ''
        return self._lstat[candidate]

    def _resolve(self, rel: str) -> str | None:
        parts = [p for p in rel.split('/') if p]
        parts.reverse()
        done: list[str] = []
        hops = 0
        while parts:
            name = parts.pop()
            if name == '.':
                continue
            if name == '..':
                # The real parent: '/..' is '/' (path_resolution(7)).
                if done:
                    done.pop()
                continue
            candidate = '/' + '/'.join(done + [name])
            kind = self._kind(candidate)
            if kind is None:
                return None
            if kind:
                hops += 1
                if hops > self._MAX_LINKS:
                    self.warn('symlink loop below %s' % candidate)
                    return None
                if kind.startswith('/'):
                    done = []
                parts.extend(reversed([p for p in kind.split('/') if p]))
                continue
            done.append(name)
        return '/' + '/'.join(done)

    def link_name(self, rel: str) -> str | None:
        """Last component of a symlink's target (a driver or device name), or None."""
        target = self.resolve(rel)
        return None if target is None else os.path.basename(target)


def normalise_path(path: str) -> str:
    """'/a/b/../c' -> '/a/c', lexically, never above '/'."""
    done: list[str] = []
    for part in path.split('/'):
        if part == '..':
            if done:
                done.pop()
        elif part and part != '.':
            done.append(part)
    return '/' + '/'.join(done)


# A sysfs number is at most 64 bits (20 decimal digits, '0x' and 16 hex digits, a sign): a
# longer one is damage, and an int of thousands of digits cannot even be written as JSON
# (str() refuses past sys.get_int_max_str_digits(), a ValueError in exit_json).
_INT_TEXT_MAX = 24


def parse_int(value: str | None, base: int = 10) -> int | None:
    """int of a sysfs value, or None when it is not a number (e.g. 'N/A (no PMA)')."""
    if value is None:
        return None
    value = value.strip()
    if len(value) > _INT_TEXT_MAX or not value.isascii():
        return None
    try:
        return int(value, base)
    except ValueError:
        return None


def parse_hex(value: str | None) -> int | None:
    """int of '0x10de' / '10de', or None."""
    return parse_int(value, 16)


def parse_numa(text: str | None) -> int | None:
    """numa_node attribute; -1 (no affinity known, common in VMs) -> None."""
    value = parse_int(text)
    return None if value is None or value < 0 else value
