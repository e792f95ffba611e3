# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Print lines on the console, one line each (documentation: plugins/modules/fabric_console.py).

ansible.builtin.debug prints a message through the stdout callback's result format: with
ansible-core's default (json), a multi-line message is one JSON string with '\\n' escapes, and
a list is quoted and wrapped with the yaml format. The checkout's ansible.cfg sets yaml; an
installed collection has no ansible.cfg. Printed through Ansible's Display, as
fabric_report_write prints the report's summary, the lines read the same whatever the callback's
settings.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._printable import printable_lines

display = Display()


def console_lines(lines: Any) -> list[str]:
    """``lines`` (a list, or one string) as the lines to print: an item with newlines is several lines;
    control characters (a hostile node's fact value) written as their escapes, never sent to the terminal."""
    if isinstance(lines, (str, bytes)) or not isinstance(lines, (list, tuple)):
        lines = [lines]
    return printable_lines([part for line in lines for part in str(line).split('\n')])


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('lines',))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super(ActionModule, self).run(tmp, task_vars)
        if 'lines' not in self._task.args:
            raise AnsibleActionFail('fabric_console: lines is required')
        lines = console_lines(self._task.args['lines'])
        for line in lines:
            display.display(line)
        result.update(changed=False, printed=len(lines))
        return result
