# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Files the controller writes: one atomic write for every output (report files, records)."""

from __future__ import annotations

import errno
import os
import tempfile

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._paths import destination_problem


class NotRegularDestination(OSError):
    """``path`` exists and is no regular file (a device, FIFO, socket, directory, a symlink to one)."""


def check_destination(path):
    """Raise NotRegularDestination (an OSError whose strerror says why) unless a new file may be
    renamed over ``path``: renaming over /dev/null or a FIFO replaces the device or pipe itself."""
    problem = destination_problem(path)
    if problem:
        raise NotRegularDestination(errno.EEXIST, 'it ' + problem, path)


def write_atomic(path, data, mode):
    """Write ``data`` (bytes) to ``path`` through a temporary file in the same directory renamed
    over it, so that a reader never sees half a file; ``mode``: its permissions. An existing
    ``path`` that is no regular file (check_destination) is refused before anything is written."""
    check_destination(path)
    directory = os.path.dirname(path)
    handle, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(handle, 'wb') as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
