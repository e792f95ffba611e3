# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Act on a report's verdicts in the scheduler (documentation: plugins/modules/fabric_quarantine.py).

On the controller: read report.json (plugin_utils/_quarantine.py), run slurm_node_state where scontrol is (the
task's host, or its delegate), write what it did to quarantine.json beside the report, print a line per node.
"""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _slurm
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch, _quarantine
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._files import OutputError, write_atomic

display = Display()
SCHEDULERS = ('none', 'slurm')


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('scheduler', 'report', 'dest', 'quarantine_max', 'scontrol'))

    def run(self, tmp=None, task_vars=None):
        _controller_watch.stop_with_controller()
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        scheduler = to_text(args.get('scheduler') or 'none')
        if scheduler not in SCHEDULERS:
            raise AnsibleActionFail('scheduler must be one of %s, not %r' % (', '.join(SCHEDULERS), scheduler))
        if scheduler == 'none':
            result.update(changed=False, skipped_reason='gpu_fabric_scheduler is none',
                          lines=['no scheduler given (gpu_fabric_scheduler: none): no node drained or resumed; '
                                 'set gpu_fabric_scheduler=slurm to act on the report'])
            self._say(result['lines'])
            return result
        try:
            share = float(args.get('quarantine_max', _slurm.DEFAULT_SHARE))
        except (TypeError, ValueError):
            raise AnsibleActionFail('quarantine_max must be a number (a share of the nodes), not %r' % (args.get('quarantine_max'),))
        if not 0 < share <= 1:
            raise AnsibleActionFail('quarantine_max must be a share of the nodes above 0 and at most 1, not %s' % share)
        report = args.get('report')
        if not report or not isinstance(report, string_types):
            raise AnsibleActionFail('report (the path of a report.json) is required')
        report = os.path.abspath(os.path.expanduser(to_text(report)))
        try:
            read = _quarantine.read(report)
        except _quarantine.ReportError as error:
            raise AnsibleActionFail(str(error))
        module_args = {'verdicts': read['verdicts'], 'report_time': read['report_time'], 'quarantine_max': share}
        if args.get('scontrol'):
            module_args['scontrol'] = to_text(args['scontrol'])
        outcome = self._execute_module(module_name='hpc.gpu_fabric.slurm_node_state', module_args=module_args, task_vars=task_vars)
        check = bool(self._task.check_mode)
        lines = _quarantine.lines(outcome, scheduler, check) if not outcome.get('failed') or outcome.get('nodes') else []
        if not outcome.get('failed'):
            dest = to_text(args.get('dest') or os.path.dirname(report))
            content = json.dumps(_quarantine.record(outcome, report, read['generated_at'], scheduler, share, check), indent=2, sort_keys=True) + '\n'
            path = os.path.join(os.path.abspath(os.path.expanduser(dest)), 'quarantine.json')
            try:
                # The record of this run, written in --check runs too (it says what would be done); no node changes
                # with it, so it is not counted as a change.
                write_atomic(path, to_bytes(content), 0o644)
            except (OSError, OutputError) as error:
                lines.append('quarantine.json could not be written: %s' % error)
            result['record'] = path
        result.update({key: outcome.get(key) for key in ('nodes', 'actions', 'capped', 'cap', 'total')})
        result.update(changed=bool(outcome.get('changed')), lines=lines)
        if outcome.get('diff'):
            result['diff'] = outcome['diff']
        if outcome.get('failed'):
            result.update(failed=True, msg=outcome.get('msg'))
        self._say(lines)
        return result

    @staticmethod
    def _say(lines):
        for line in lines:
            display.display(line)
