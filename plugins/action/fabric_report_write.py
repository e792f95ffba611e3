# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The report stage in one task (documentation: plugins/modules/fabric_report_write.py).

Why an action: as tasks, the report was a set_fact of the whole report.json (templated again by
every task that named it: 11 times over 9 filter calls, report.md rendered twice), a drift
set_fact, five rendered contents handed to fabric_output, a policy set_fact and two fail tasks.
Here the nodes' hostvars are read once (the fleet model), the diagnosis, the drift and every rendering run in the
task's worker (plugin_utils/report/_report_stage.py, the code the filters of plugins/filter/report.py
call too), the files are written as fabric_output writes them (plugin_utils/report/_files.py), and the
report never becomes an Ansible variable.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _printable
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._files import OutputError, write_files

display = Display()


def _text(args: dict[str, Any], name: str) -> str | None:
    """An optional text argument: None, '' (unset, as `default('')` passes it) or a string."""
    value = args.get(name)
    if value is None or value == '':
        return None
    if not isinstance(value, string_types):
        # ansible-core before 2.19 turns a template's result that reads as a Python list or dict
        # ('[]', "['a']") into one: the user wrote a string, and is told how it arrived.
        raise AnsibleActionFail('%s must be a string, got %s%s' % (name, type(value).__name__, (
            ' (%r: ansible-core before 2.19 reads a value that looks like a Python list or dict as one; '
            'write the expression so that it does not)' % (value,)) if isinstance(value, (list, dict)) else ''))
    return to_text(value)


def _judged(result: Any) -> str | None:
    """The bench.json this run's benchmark judging wrote (the registered result of
    hpc.gpu_fabric.fabric_bench_judge, benchmark.yml and offline.yml), or None: the judging did not
    run, was skipped, or wrote nothing (check mode). A bench.json of an earlier run is never read.
    ValueError when the judging failed (the playbooks let the report run after it): never read as
    "no benchmark" - the report is written without the verdicts and the run fails."""
    if not isinstance(result, dict) or result.get('skipped'):
        return None
    if result.get('failed'):
        raise ValueError('the benchmark judging failed: %s' % (result.get('msg') or 'no reason given'))
    path = result.get('bench_json')
    return to_text(path) if isinstance(path, string_types) and path else None


def _earlier(baseline: str | None, problems: list[str]) -> dict[str, Any] | None:
    """The baseline report, read once: for the drift, and a lone node's comparison with its own earlier run.
    One that cannot be read is {'error': why}, said in the report too (BASELINE_NOT_USED), and in ``problems``."""
    if not baseline:
        return None
    try:
        return _report_stage.read_baseline(os.path.expanduser(baseline))
    except ValueError as exc:
        problems.append(str(exc))
        return {'error': str(exc)}


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('hosts', 'dest', 'baseline', 'regression_pct', 'exit_policy'))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        _controller_watch.stop_with_controller()   # ends this worker if ansible-playbook is killed
        result: dict[str, Any] = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        hosts, dest = args.get('hosts'), args.get('dest')
        if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, string_types) for h in hosts):
            raise AnsibleActionFail('hosts must be a list of inventory names, got %r' % (hosts,))
        if not dest or not isinstance(dest, string_types):
            raise AnsibleActionFail('dest (the directory to write the report into) is required')
        baseline, policy = _text(args, 'baseline'), _text(args, 'exit_policy')
        try:
            pct = _report_stage.regression_pct(args.get('regression_pct', 10))
        except ValueError as exc:
            raise AnsibleActionFail(str(exc))
        # On the controller: a relative directory is relative to where ansible-playbook runs.
        dest = os.path.abspath(os.path.expanduser(to_text(dest)))
        html_path = os.path.join(dest, 'report.html')

        # The run's state: the fleet model (the nodes' hostvars, read once: plugin_utils/fleet/_fleet_model.py),
        # the benchmark's verdicts (the bench.json fabric_bench_judge wrote in this run), the
        # collective's result (from the first node that holds one).
        model = _fleet_model.read(task_vars.get('hostvars'), list(hosts), ('facts', 'run', 'collective'))
        problems: list[str] = []
        bench = None
        # A judging that failed, or results that cannot be read: the report is written without them, and the run fails.
        try:
            path = _judged(task_vars.get('gpu_fabric_bench'))
            bench = _report_stage.read_bench(path) if path else None
        except ValueError as exc:
            problems.append(str(exc))
        now = datetime.datetime.now(datetime.timezone.utc)
        earlier = _earlier(baseline, problems)
        report = _report_stage.from_model(model, bench or None, model['collective'] or None,
                                          # As the report always had it: ISO 8601, UTC, no offset.
                                          now.replace(tzinfo=None).isoformat(), baseline=earlier)
        if earlier is not None and not earlier.get('error'):
            # A baseline that cannot be used still leaves this run's report written; the run fails.
            try:
                report = _report_stage.with_drift(report, earlier, pct)
            except ValueError as exc:
                problems.append(str(exc))

        planned = list(_report_stage.render(report, html_path, time.time()))
        try:
            written: dict[str, Any] = write_files(dest, planned, 0o644, bool(self._task.check_mode), bool(self._task.diff))
        except OutputError as exc:
            written = {'files': [], 'changed': False, 'diff': [], 'failures': [str(exc)]}
        if written['failures']:
            problems.insert(0, 'could not write %d of %d file(s): %s' % (
                len(written['failures']), len(planned), '; '.join(written['failures'])))

        lines = _report_stage.console_lines(report, html_path)
        for line in lines:
            display.display(line)
        try:
            matched, reasons = _report_stage.verdict(report, policy)
        except ValueError as exc:
            matched, reasons = None, [str(exc)]
        problems += reasons

        result.update(dest=dest, files=written['files'], changed=written['changed'], summary=report['summary'],
                      matched=_report_stage.matched_ids(matched) if matched else [],
                      not_checked=_report_stage.not_checked(report))
        if written['diff']:
            result['diff'] = written['diff']
        if problems:
            # Ansible prints a failed task's whole result: the summary lines above already said
            # what was found and the message says why it fails; the files and the list of
            # matched ids (hundreds on a large fleet) stay out of the console.
            for key in ('files', 'summary', 'matched'):
                result.pop(key, None)
            # A failure message can quote a file name or a policy given by someone else.
            result.update(failed=True, msg=_printable.printable('; '.join(problems)))
        else:
            result['msg'] = lines[0]
        return result
