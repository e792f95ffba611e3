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
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._files import OutputError, write_files


def _mode(value: Any) -> int:
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


def _check_name(name: Any) -> str:
    text = to_text(name)
    if not text or text in ('.', '..') or '/' in text or '\0' in text:
        raise AnsibleActionFail('file name %r is not a plain file name (no "/", not "." or "..")' % (name,))
    return text


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('dest', 'files', 'mode'))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        _controller_watch.stop_with_controller()   # ends this worker if ansible-playbook is killed
        result: dict[str, Any] = super(ActionModule, self).run(tmp, task_vars)
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

        planned: list[tuple[str, bytes]] = []
        for name in sorted(files):
            content = files[name]
            if content is None:
                content = ''
            if not isinstance(content, string_types):
                raise AnsibleActionFail('content of %s must be text, got %s (render it, e.g. with to_nice_json)'
                                        % (name, type(content).__name__))
            planned.append((_check_name(name), to_bytes(content, errors='surrogate_or_strict')))

        try:
            written = write_files(dest, planned, mode, check, bool(self._task.diff))
        except OutputError as exc:
            raise AnsibleActionFail(str(exc))
        result.update(dest=dest, files=written['files'], changed=written['changed'])
        if written['diff']:
            result['diff'] = written['diff']
        failures = written['failures']
        if failures:
            result.update(failed=True, msg='could not write %d of %d file(s): %s' % (
                len(failures), len(planned), '; '.join(failures)))
        return result
