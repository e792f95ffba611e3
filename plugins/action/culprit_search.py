# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Drive the culprit search round by round (documentation: plugins/modules/culprit_search.py).

Why an action: a round is a handful of collective_bench runs over disjoint nodes, started
together on the launcher node and waited for together; the next round depends on their
verdicts. As tasks, that was an include per round (a fixed number of them, the rest skipped)
with four tasks each and a retry line per second of waiting. Here the rounds run in the task's
worker: each run starts as an async job (the async wrapper, as an ``async:`` task starts it),
the jobs are polled with async_status until all have finished or their time is up, the
verdicts go into _culprit_search, and one line per round says what happened.
"""

from __future__ import annotations

import math
import time

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _printable
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench, _culprit_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage

display = Display()

BENCH_MODULE = 'hpc.gpu_fabric.collective_bench'
# collective_bench's own arguments that the search sets per run, or that would make a run fail the task.
RESERVED = frozenset(('hosts', 'fail_on_error', 'from_log'))
# Connection errors in a row before the launcher node counts as lost (one drop in a long wait is not).
CONNECTION_TRIES = 3


def _number(args, name, default, lowest, highest):
    """``name`` as a finite number from ``lowest`` to ``highest``: every ``-e key=value`` arrives as
    a string, and float() takes 'nan' and 'inf'."""
    value = args.get(name, default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise AnsibleActionFail('%s must be a number, got %r' % (name, args.get(name)))
    if not math.isfinite(value) or not lowest <= value <= highest:
        raise AnsibleActionFail('%s must be a number from %s to %s, got %s' % (name, lowest, highest, value))
    return value


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('nodes', 'names', 'reference', 'prior', 'from_facts', 'pairs', 'bench_pairs', 'strategy', 'bench', 'timeout',
                             'delay'))

    @staticmethod
    def _flag(args, name):
        # -e fabric_collective_suspect_facts=false arrives as the string 'false'.
        try:
            return boolean(args.get(name, False), strict=True)
        except TypeError:
            raise AnsibleActionFail('%s must be true or false, got %r' % (name, args.get(name)))

    def _status(self, jid, mode, async_dir, task_vars):
        # As ansible.builtin.async_status's action does it (ansible-core 2.16 to 2.21).
        return self._execute_module(module_name='ansible.legacy.async_status', task_vars=task_vars,
                                    module_args={'jid': jid, 'mode': mode, '_async_dir': async_dir})

    def _start(self, bench, hosts, limit, task_vars):
        """Start one run as an async job on the launcher node: its job result, or the failure."""
        args = dict(bench, hosts=hosts, fail_on_error=False)
        saved = self._task.async_val
        self._task.async_val = limit
        try:
            return self._execute_module(module_name=BENCH_MODULE, module_args=args, task_vars=task_vars, wrap_async=True)
        except AnsibleConnectionFailure:
            raise
        except AnsibleError as exc:
            return {'failed': True, 'msg': 'the run could not start: %s' % to_text(exc)}
        finally:
            self._task.async_val = saved

    def _wait(self, jobs, limit, delay, async_dir, task_vars):
        """Every job's final result (in order), polling all of them until each has finished or ``limit`` s passed."""
        results = list(jobs)
        pending = dict((i, job['ansible_job_id']) for i, job in enumerate(jobs)
                       if isinstance(job, dict) and job.get('ansible_job_id') and not job.get('failed'))
        started, lost = time.monotonic(), 0
        while pending:
            for index, jid in list(pending.items()):
                try:
                    status = self._status(jid, 'status', async_dir, task_vars)
                    lost = 0
                except AnsibleConnectionFailure:
                    lost += 1
                    if lost >= CONNECTION_TRIES:
                        raise
                    continue
                if status.get('finished') or status.get('failed'):
                    results[index] = status
                    del pending[index]
                    try:
                        self._status(jid, 'cleanup', async_dir, task_vars)
                    except AnsibleError:
                        pass    # the verdict is in hand; a job file left behind loses nothing
            if pending and time.monotonic() - started >= limit:
                for index, jid in pending.items():
                    results[index] = {'failed': True, 'ansible_job_id': jid,
                                      'msg': 'the run was still going after %d s (the benchmark timeout and a minute)' % limit}
                break
            if pending:
                time.sleep(delay)
        return results

    def run(self, tmp=None, task_vars=None):
        _controller_watch.stop_with_controller()   # ends this worker if ansible-playbook is killed
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        nodes = args.get('nodes')
        if not isinstance(nodes, list) or not all(isinstance(n, string_types) and n for n in nodes):
            raise AnsibleActionFail('nodes must be a list of inventory names')
        names = args.get('names') or {}
        bench = args.get('bench') or {}
        if not isinstance(names, dict) or not isinstance(bench, dict):
            raise AnsibleActionFail('names and bench must be mappings')
        # omit inside a mapping is left as its placeholder by ansible-core before 2.19: such an
        # argument is left out, as omit does for a task's own arguments.
        omit = (task_vars or {}).get('omit')
        bench = dict((key, value) for key, value in bench.items() if not (omit and value == omit))
        reserved = sorted(RESERVED & set(bench))
        if reserved:
            raise AnsibleActionFail('bench must not set %s: the search sets them per run' % ', '.join(reserved))
        pairs, prior = args.get('pairs'), args.get('prior') or []
        try:
            # The arguments' checks, before anything is read or run: the search's own (_culprit_search.begin).
            _culprit_search.begin(nodes, None, prior, pairs, args.get('strategy'))
        except ValueError as exc:
            raise AnsibleActionFail(str(exc))
        from_facts, bench_pairs = (self._flag(args, name) for name in ('from_facts', 'bench_pairs'))
        if from_facts or (bench_pairs and pairs is None):
            # The nodes' facts and this run's pairwise records, read here from the fleet model
            # rather than passed in as arguments: the report's findings and every pair's verdict
            # would be templated into the task's arguments (hundreds of thousands of entries).
            parts = (('facts', 'run') if from_facts else ()) + (('bench',) if bench_pairs and pairs is None else ())
            model = _fleet_model.read((task_vars or {}).get('hostvars') or {}, nodes, parts)
            if from_facts:
                prior = prior + _report_stage.from_model(model)['findings']
            if bench_pairs and pairs is None and model.get('bench_fleet') is not None:
                # With the thresholds role fabric_bench checked and kept in its fleet plan, as bench.json
                # is judged (_bench.judged_with): a pair ok there is never named bad here.
                pairs = _bench.judge(_fleet_model.bench_nodes(model), model['bench_fleet'])
        timeout = _number(args, 'timeout', bench.get('timeout', 900), 1, 30 * 86400)
        delay = _number(args, 'delay', 1, 0.05, 60)
        limit = int(math.ceil(timeout)) + 60

        state = _culprit_search.begin(nodes, args.get('reference'), prior, pairs, args.get('strategy'))
        lines = []
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg='the search runs no benchmark in check mode', search=state)
            return result
        async_dir = self._remote_expand_user(self.get_shell_option('async_dir', default='~/.ansible_async'))
        try:
            while not state['done']:
                runs = _culprit_search.next_round(state)
                began = time.monotonic()
                jobs = [self._start(bench, [to_text(names.get(h, h)) for h in run['hosts']], limit, task_vars) for run in runs]
                finished = self._wait(jobs, limit, delay, async_dir, task_vars)
                state = _culprit_search.update(state, runs, [_culprit_search.verdict_of(r) for r in finished],
                                               time.monotonic() - began)
                # Host names are the inventory's: printed as shown, never acted on by the terminal.
                line = _printable.printable(_culprit_search.round_line(state))
                lines.append(line)
                display.display('culprit search %s' % line)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(changed=False, search=state, lines=lines, msg=lines[-1] if lines else 'culprit search: nothing to run')
        return result
