# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""fabric_console: lines printed one console line each, through Ansible's display (not the stdout callback's
result format), control characters escaped."""

from __future__ import annotations

from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.hpc.gpu_fabric.plugins.action import fabric_console
from ansible_collections.hpc.gpu_fabric.plugins.action.fabric_console import ActionModule, console_lines


def run(args):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = 'hpc.gpu_fabric.fabric_console'
    action = ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    with mock.patch.object(fabric_console, 'display') as display:
        result = action.run(task_vars={})
    return result, [call.args[0] for call in display.display.call_args_list]


def test_each_line_is_one_console_line_as_it_is():
    lines = ['localhost: 8 RDMA device(s), 8/8 port(s) ACTIVE; 8 GPU(s) (nvidia); GPUDirect RDMA ready',
             '  ! mlx5_0/1 InfiniBand ACTIVE/LinkUp 100 Gb/s 1X: IB_RATE_DEGRADED "quoted" é']
    result, printed = run({'lines': lines})
    assert printed == lines
    assert result['printed'] == 2 and result['changed'] is False and not result.get('failed')


def test_newlines_make_lines_and_control_characters_are_escaped():
    # A hostile node's value must not drive the operator's terminal (an OSC title sequence here).
    assert console_lines(['a\nb', 'node \x1b]0;pwned\x07 x']) == ['a', 'b', 'node \\x1b]0;pwned\\x07 x']
    assert console_lines('one\ntwo') == ['one', 'two']
    assert console_lines([]) == []


def test_lines_are_required():
    with pytest.raises(AnsibleActionFail, match='lines is required'):
        run({})
