# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Judge the pairwise benchmark and write bench.json (documentation: plugins/modules/fabric_bench_judge.py).

Why an action: as tasks, the judging was a set_fact of every pair's verdict on the controller
(a 256-node full mesh over 8 rails is about half a million pair tests), templated again by the
task that wrote bench.json, by the console summary and by the report. Here the records are read
from their files one node at a time (plugin_utils/bench/_bench.py report()), the verdicts are written
to bench.json as fabric_output writes (plugin_utils/report/_files.py), and the task returns only the
counts, the console lines and the file's path: the pair list never becomes an Ansible variable.
The report action (fabric_report_write) reads bench.json back from that path.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model, _offline
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._files import OutputError, write_files

THRESHOLDS = _bench.THRESHOLDS
NAME = 'bench.json'


def _threshold(args, name):
    """A threshold: None (unset: the default of plugin_utils/bench/_bench.py), else a positive number;
    the check is plugin_utils/bench/_bench.py threshold(), which role fabric_bench runs before any pair."""
    try:
        return _bench.threshold(name, args.get(name))
    except ValueError as exc:
        raise AnsibleActionFail(str(exc))


def judge(model, options, results=None):
    """The benchmark's verdicts: from the records of the nodes of ``model`` (the fleet model, part
    bench), or with ``results`` (perftest_run from_log results, offline.yml) from those, against the
    nodes' plans."""
    if results is not None:
        plans = dict((host, model['nodes'][host]['bench']['plan']) for host in _fleet_model.known(model))
        return _offline.bench_report(results, plans, options)
    return _bench.judge(_fleet_model.bench_nodes(model), model['bench_fleet'], options)


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('hosts', 'dest', 'results', 'limit') + THRESHOLDS)

    def run(self, tmp=None, task_vars=None):
        _controller_watch.stop_with_controller()   # ends this worker if ansible-playbook is killed
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        hosts, dest, results = args.get('hosts'), args.get('dest'), args.get('results')
        if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, string_types) for h in hosts):
            raise AnsibleActionFail('hosts must be a list of inventory names, got %r' % (hosts,))
        if not dest or not isinstance(dest, string_types):
            raise AnsibleActionFail('dest (the directory to write bench.json into) is required')
        if results is not None and not isinstance(results, (list, tuple)):
            raise AnsibleActionFail('results must be the list of a perftest_run loop (its .results), got %s' % type(results).__name__)
        try:
            limit = int(args.get('limit', 20))
        except (TypeError, ValueError):
            limit = -1
        if isinstance(args.get('limit'), bool) or limit < 0:
            raise AnsibleActionFail('limit must be a whole number, 0 or more, got %r' % (args.get('limit'),))
        options = dict((name, _threshold(args, name)) for name in THRESHOLDS)
        # On the controller: a relative directory is relative to where ansible-playbook runs.
        dest = os.path.abspath(os.path.expanduser(to_text(dest)))
        path = os.path.join(dest, NAME)

        model = _fleet_model.read(task_vars.get('hostvars'), list(hosts), ('bench',))
        bench = judge(model, options, list(results) if results is not None else None)
        data = to_bytes(_report_stage.bench_json(bench), errors='surrogate_or_strict')
        check = bool(self._task.check_mode)
        try:
            written = write_files(dest, [(NAME, data)], 0o644, check, bool(self._task.diff))
        except OutputError as exc:
            written = {'files': [], 'changed': False, 'diff': [], 'failures': [str(exc)]}

        lines = _bench.console_lines(bench, limit, path)
        # Why the mesh did not run is 'not_run' here: 'skipped' in a task's result says the task did not run.
        result.update(dest=dest, changed=written['changed'], tests=sum(bench['verdicts'].values()), verdicts=bench['verdicts'],
                      not_run=bench.get('skipped'), lines=lines, msg=lines[0])
        if written['diff']:
            result['diff'] = written['diff']
        if written['failures']:
            result.update(failed=True, msg='could not write %s: %s' % (path, '; '.join(written['failures'])))
        elif not check:
            # Only a file written (or found already right) in this run: the report reads it back.
            result['bench_json'] = path
        return result
