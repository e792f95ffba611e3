# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Write a run's output files on the controller (documentation: plugins/modules/fabric_output.py).

Why not ansible.builtin.copy: on the controller's own output directory copy runs two
modules (stat, then copy) per file, each a new Python process: 1.1-1.8 s per file on a
2-core controller, 1.2-1.4 s on a 16-core one (measured with tests/bench/callbacks), which
made writing bench.json and collective.json a tenth of a 16-node mesh benchmark and the
five report files several seconds of every run. Here the files are written by the
controller process itself, atomically (a temporary file in the same directory renamed over
the old one), so a reader never sees half a report.
"""

from __future__ import annotations

import os
import re
import stat

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils._files import check_destination, write_atomic


def _mode(value):
    """An octal string ('0644', '644', '0o644') or an int (YAML 0644 is 420) from 0 to 0o7777.
    A bool is refused: it is an int to Python, and 'mode: true' would write mode 0001."""
    if isinstance(value, bool) or not isinstance(value, (int,) + string_types):
        raise AnsibleActionFail('mode must be an octal string such as "0644" or an integer, got %r' % (value,))
    if isinstance(value, int):
        mode = value
    else:
        text = to_text(value).strip()
        # Octal digits only: int(text, 8) alone takes '+644', '6_44' and ' 644 '.
        if not re.match(r'^(?:0o)?[0-7]{1,5}$', text):
            raise AnsibleActionFail('mode must be an octal number such as "0644", got %r' % (value,))
        mode = int(text[2:] if text.startswith('0o') else text, 8)
    if mode < 0 or mode > 0o7777:
        raise AnsibleActionFail('mode %s is out of range (0 to 07777)' % (oct(mode) if mode >= 0 else mode))
    return mode


def _check_name(name):
    text = to_text(name)
    if not text or text in ('.', '..') or '/' in text or '\0' in text:
        raise AnsibleActionFail('file name %r is not a plain file name (no "/", not "." or "..")' % (name,))
    return text


def _diff(name, before, after, existed, larger=False):
    diff = {'before_header': name if existed else '%s (absent)' % name, 'after_header': name}
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


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('dest', 'files', 'mode'))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        dest = args.get('dest')
        files = args.get('files')
        if not dest or not isinstance(dest, string_types):
            raise AnsibleActionFail('dest (the directory to write into) is required')
        if not isinstance(files, dict) or not files:
            raise AnsibleActionFail('files must be a non-empty mapping of file name to content')
        mode = _mode(args.get('mode', '0644'))
        check = bool(self._task.check_mode)
        # On the controller: a relative directory is relative to where ansible-playbook runs.
        dest = os.path.abspath(os.path.expanduser(to_text(dest)))
        if os.path.exists(dest) and not os.path.isdir(dest):
            raise AnsibleActionFail('dest %s exists and is not a directory' % dest)

        planned = []
        for name in sorted(files):
            content = files[name]
            if content is None:
                content = ''
            if not isinstance(content, string_types):
                raise AnsibleActionFail('content of %s must be text, got %s (render it, e.g. with to_nice_json)'
                                        % (name, type(content).__name__))
            planned.append((_check_name(name), to_bytes(content, errors='surrogate_or_strict')))

        created_dir = False
        if not os.path.isdir(dest):
            created_dir = True
            if not check:
                try:
                    os.makedirs(dest, 0o755)
                except OSError as exc:
                    raise AnsibleActionFail('cannot create %s: %s' % (dest, exc.strerror or exc))

        report, diffs, failures = [], [], []
        for name, data in planned:
            path = os.path.join(dest, name)
            before, before_mode, larger = None, None, False
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
            if changed and self._task.diff and (larger or before != data):
                diffs.append(_diff(path, before, data, before is not None or larger, larger))
            if changed and not check:
                try:
                    write_atomic(path, data, mode)
                except OSError as exc:
                    # The others are still written: one unwritable file loses no other output.
                    failures.append('%s: %s' % (path, exc.strerror or exc))
                    continue
            report.append({'name': name, 'path': path, 'size': len(data), 'changed': changed})

        result.update(dest=dest, files=report, changed=created_dir or any(f['changed'] for f in report))
        if diffs:
            result['diff'] = diffs
        if failures:
            result.update(failed=True, msg='could not write %d of %d file(s): %s' % (
                len(failures), len(planned), '; '.join(failures)))
        return result
