# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Files the controller writes: one atomic write for every output (report files, records)."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path, data, mode):
    """Write ``data`` (bytes) to ``path`` through a temporary file in the same directory renamed
    over it, so that a reader never sees half a file; ``mode``: its permissions."""
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
