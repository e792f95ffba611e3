# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Files the controller writes: one atomic write for every output (report files, records)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from typing import Any, Iterable

from ansible import constants as C
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._paths import destination_problem


class NotRegularDestination(OSError):
    """``path`` exists and is no regular file (a device, FIFO, socket, directory, a symlink to one)."""


def check_destination(path: str) -> None:
    """Raise NotRegularDestination (an OSError whose strerror says why) unless a new file may be
    renamed over ``path``: renaming over /dev/null or a FIFO replaces the device or pipe itself."""
    problem = destination_problem(path)
    if problem:
        raise NotRegularDestination(errno.EEXIST, 'it ' + problem, path)


def write_atomic(path: str, data: bytes, mode: int) -> None:
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


class OutputError(Exception):
    """The output directory cannot be used (exists as something else, cannot be created)."""


def _diff(name: str, before: bytes | None, after: bytes, existed: bool, larger: bool = False) -> dict[str, Any]:
    diff: dict[str, Any] = {'before_header': name if existed else '%s (absent)' % name, 'after_header': name}
    limit = C.MAX_FILE_SIZE_FOR_DIFF
    if larger or (before is not None and len(before) > limit):
        diff['dst_larger'] = limit
    elif len(after) > limit:
        diff['src_larger'] = limit
    elif b'\0' in (before or b'') or b'\0' in after:
        diff['dst_binary' if b'\0' in (before or b'') else 'src_binary'] = 1
    else:
        diff['before'] = to_text(before or b'', errors='surrogate_or_strict')
        diff['after'] = to_text(after, errors='surrogate_or_strict')
    return diff


def write_files(dest: str, planned: Iterable[tuple[str, bytes]], mode: int, check: bool = False, diff: bool = False) -> dict[str, Any]:
    """Write ``planned`` ([(plain file name, bytes)]) into the directory ``dest`` (absolute; created
    with its parents, mode 0755), each atomically, with permissions ``mode``; a file whose content
    and mode are already right is left alone. ``check``: write nothing, say what would change;
    ``diff``: the changes as Ansible diffs. Returns {'files': [{name, path, size, changed}],
    'changed', 'diff': [...], 'failures': ['path: why']}: one file that cannot be written does not
    stop the others. OutputError when ``dest`` cannot be used at all. The actions fabric_output and
    fabric_report_write both write through here."""
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise OutputError('dest %s exists and is not a directory' % dest)
    created_dir = False
    if not os.path.isdir(dest):
        created_dir = True
        if not check:
            try:
                os.makedirs(dest, 0o755)
            except OSError as exc:
                raise OutputError('cannot create %s: %s' % (dest, exc.strerror or exc))

    report: list[dict[str, Any]] = []
    diffs: list[dict[str, Any]] = []
    failures: list[str] = []
    for name, data in planned:
        path = os.path.join(dest, name)
        before: bytes | None = None
        before_mode: int | None = None
        larger = False
        try:
            # A FIFO there would block the read of the old content, /dev/zero never end it, and
            # the rename would replace the device or pipe itself: refused before anything.
            check_destination(path)
            # The old content is compared (and shown in a diff) only up to a cap: a larger old
            # file simply differs.
            before = _paths.read_regular(path, max(len(data), C.MAX_FILE_SIZE_FOR_DIFF), follow=True)
            before_mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            pass
        except _paths.TooLarge:
            larger, before_mode = True, stat.S_IMODE(os.stat(path).st_mode)
        except (OSError, ValueError) as exc:
            failures.append('%s: %s' % (path, getattr(exc, 'strerror', None) or exc))
            continue
        changed = larger or before != data or before_mode != mode
        if changed and diff and (larger or before != data):
            diffs.append(_diff(path, before, data, before is not None or larger, larger))
        if changed and not check:
            try:
                write_atomic(path, data, mode)
            except OSError as exc:
                # The others are still written: one unwritable file loses no other output.
                failures.append('%s: %s' % (path, exc.strerror or exc))
                continue
        report.append({'name': name, 'path': path, 'size': len(data), 'changed': changed})
    return {'files': report, 'changed': created_dir or any(f['changed'] for f in report), 'diff': diffs, 'failures': failures}
