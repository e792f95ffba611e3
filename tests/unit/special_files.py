# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Entries that are no regular file, made inside a test's own temporary directory only.

A test that writes or reads a path a user names is run against each of these; nothing outside
``directory`` is ever created, opened or replaced (the character device is a new node with the
numbers of /dev/null, made here, and only as root).
"""

from __future__ import annotations

import os
import socket
import stat

import pytest

KINDS = ('fifo', 'socket', 'directory', 'device')


def make(directory, kind, name=None, device=(1, 3)):
    """Create one entry of ``kind`` (KINDS, or 'link-<kind>': a symlink to one) named ``name`` in
    ``directory``; returns its path. ``device``: the major and minor numbers of a device node
    (1, 3: as /dev/null; 1, 5: as /dev/zero, devices.txt of the kernel). Skips the test for a
    device when not root."""
    name = name or kind
    path = os.path.join(str(directory), name)
    if kind.startswith('link-'):
        target = make(directory, kind[len('link-'):], name + '.target', device)
        os.symlink(os.path.basename(target), path)
        return path
    if kind == 'fifo':
        os.mkfifo(path)
    elif kind == 'directory':
        os.mkdir(path)
    elif kind == 'device':
        if os.geteuid() != 0:
            pytest.skip('making a device node needs root (mknod(2))')
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(*device))
    elif kind == 'socket':
        # sun_path holds 108 bytes (unix(7)): bind a name relative to the directory.
        here = os.getcwd()
        os.chdir(str(directory))
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(name)
            sock.close()
        finally:
            os.chdir(here)
    else:
        raise ValueError(kind)
    return path


ALL = KINDS + tuple('link-' + kind for kind in KINDS)


def identity(path):
    """What must not change: the entry's type and inode, and its target's when a symlink."""
    info = os.lstat(path)
    result = (stat.S_IFMT(info.st_mode), info.st_ino)
    if stat.S_ISLNK(info.st_mode):
        target = os.stat(path)
        result += (stat.S_IFMT(target.st_mode), target.st_ino)
    return result
