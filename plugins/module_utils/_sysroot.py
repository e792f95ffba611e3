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
"""

from __future__ import annotations

import errno
import os


class SysRoot(object):
    """Read-only view of a node's filesystem below ``root``."""

    # A symlink chain longer than this is a loop (Linux uses 40, fs/namei.c MAXSYMLINKS).
    _MAX_LINKS = 40

    def __init__(self, root='/'):
        self.root = os.path.abspath(root or '/')
        # Plain concatenation: a facts run reads thousands of sysfs files (GID
        # tables are 128-255 entries per port) and os.path.join showed in profiles.
        self._prefix = '' if self.root == '/' else self.root
        self._resolved = {}
        self._cache = {}
        self.warnings = []

    def path(self, rel):
        """Absolute host path of ``rel`` (a node path such as /sys/class/net)."""
        return self._prefix + '/' + rel.lstrip('/')

    def warn(self, msg):
        if msg not in self.warnings:
            self.warnings.append(msg)

    def _report(self, rel, exc, quiet_errnos=(errno.ENOENT, errno.ENOTDIR)):
        if getattr(exc, 'errno', None) not in quiet_errnos:
            self.warn('cannot read %s: %s' % (rel, getattr(exc, 'strerror', None) or exc))

    def text(self, rel, quiet=False):
        """Content of a small text file, trailing whitespace removed, or None.

        sysfs attributes end with one newline; some captured trees carry extra
        blank lines (prometheus/procfs fixtures), so all trailing whitespace goes.
        ``quiet`` silences errors that are expected for that file (for example
        EINVAL from the gid_attrs of an unused GID entry).
        """
        try:
            fd = os.open(self.path(rel), os.O_RDONLY)
        except OSError as exc:
            if not quiet:
                self._report(rel, exc)
            return None
        try:
            data = os.read(fd, 1 << 20)
        except OSError as exc:
            if not quiet:
                self._report(rel, exc)
            return None
        finally:
            os.close(fd)
        return data.decode('utf-8', 'replace').rstrip()

    def binary(self, rel, size=4096):
        """Up to ``size`` bytes of a binary file (PCI config space), or None."""
        try:
            with open(self.path(rel), 'rb') as handle:
                return handle.read(size)
        except (IOError, OSError) as exc:
            self._report(rel, exc)
            return None

    def cached(self, rel):
        """Whole content (bytes) of a file read at most once per run, or None."""
        if rel not in self._cache:
            try:
                with open(self.path(rel), 'rb') as handle:
                    self._cache[rel] = handle.read()
            except (IOError, OSError) as exc:
                self._report(rel, exc)
                self._cache[rel] = None
        return self._cache[rel]

    def listdir(self, rel):
        """Sorted entries of a directory; [] when it does not exist."""
        try:
            return sorted(os.listdir(self.path(rel)))
        except (IOError, OSError) as exc:
            self._report(rel, exc)
            return []

    def exists(self, rel):
        return os.path.exists(self.path(rel))

    def isdir(self, rel):
        return os.path.isdir(self.path(rel))

    def resolve(self, rel):
        """Node path that ``rel`` points to after following every symlink.

        Symlinks are followed inside the root: an absolute target (as a
        snapshot tarball may hold) is re-rooted instead of escaping to the
        controller's own /sys. Returns None when a component is missing.
        """
        if rel in self._resolved:
            return self._resolved[rel]
        result = self._resolve(rel)
        self._resolved[rel] = result
        return result

    def _resolve(self, rel):
        parts = [p for p in rel.split('/') if p]
        done = []
        hops = 0
        while parts:
            name = parts.pop(0)
            if name == '.':
                continue
            if name == '..':
                if done:
                    done.pop()
                continue
            candidate = '/' + '/'.join(done + [name])
            host = self.path(candidate)
            if os.path.islink(host):
                hops += 1
                if hops > self._MAX_LINKS:
                    self.warn('symlink loop below %s' % candidate)
                    return None
                target = os.readlink(host)
                if target.startswith('/'):
                    done = []
                parts = [p for p in target.split('/') if p] + parts
                continue
            if not os.path.lexists(host):
                return None
            done.append(name)
        return '/' + '/'.join(done)

    def link_name(self, rel):
        """Last component of a symlink's target (a driver or device name), or None."""
        target = self.resolve(rel)
        return None if target is None else os.path.basename(target)


def parse_int(value, base=10):
    """int of a sysfs value, or None when it is not a number (e.g. 'N/A (no PMA)')."""
    if value is None:
        return None
    try:
        return int(value.strip(), base)
    except ValueError:
        return None


def parse_hex(value):
    """int of '0x10de' / '10de', or None."""
    if value is None:
        return None
    try:
        return int(value.strip(), 16)
    except ValueError:
        return None


def parse_numa(text):
    """numa_node attribute; -1 (no affinity known, common in VMs) -> None."""
    value = parse_int(text)
    return None if value is None or value < 0 else value
