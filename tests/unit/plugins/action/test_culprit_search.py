# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The culprit_search action: each round's runs start as async collective_bench jobs on the
task's host and are polled together; verdicts drive the next round; one line per round; a run
that does not start, or does not finish in time, is bad (never a cleared node)."""

from __future__ import annotations

from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.hpc.gpu_fabric.plugins.action.culprit_search import ActionModule

OMIT = '__omit_place_holder__0123'


class Fleet(object):
    """_execute_module as the launcher node answers it: a collective_bench job per start, its
    result at the first async_status look; a run with ``slow`` in it is low."""

    def __init__(self, slow=(), lost=(), hang=()):
        self.slow, self.lost, self.hang = set(slow), set(lost), set(hang)
        self.started, self.jobs, self.args = [], {}, []

    def __call__(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **_kwargs):
        if module_name == 'hpc.gpu_fabric.collective_bench':
            assert wrap_async is True
            self.args.append(dict(module_args))
            hosts = module_args['hosts']
            if set(hosts) & self.lost:
                return {'failed': True, 'msg': 'the run could not start: no mpirun'}
            jid = 'j%d' % len(self.started)
            self.started.append(hosts)
            self.jobs[jid] = hosts
            return {'ansible_job_id': jid, 'started': 1, 'finished': 0}
        assert module_name == 'ansible.legacy.async_status'
        hosts = self.jobs[module_args['jid']]
        if module_args['mode'] == 'cleanup':
            return {}
        if set(hosts) & self.hang:
            return {'ansible_job_id': module_args['jid'], 'started': 1, 'finished': 0}
        bad = bool(set(hosts) & self.slow)
        return {'ansible_job_id': module_args['jid'], 'finished': 1, 'status': 'ok',
                'verdict': {'status': 'low' if bad else 'ok', 'ratio': 0.3 if bad else 0.95}}


class Clock(object):
    """time for the action: each look at the clock is 20 s later, sleeping takes no time."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        self.now += 20.0
        return self.now

    def sleep(self, seconds):
        pass


def run(args, fleet, check=False, hostvars=None):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check
    task.action = 'hpc.gpu_fabric.culprit_search'
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    action._execute_module = fleet
    action._remote_expand_user = lambda path: path
    action.get_shell_option = lambda name, default=None: default
    action._remove_tmp_path = lambda path: None
    with mock.patch('ansible_collections.hpc.gpu_fabric.plugins.action.culprit_search.display') as display, \
            mock.patch('ansible_collections.hpc.gpu_fabric.plugins.action.culprit_search.time', Clock()):
        result = action.run(task_vars={'omit': OMIT, 'hostvars': hostvars or {}})
    return result, [c.args[0] for c in display.display.call_args_list]


NODES = ['n%02d' % i for i in range(24)]


def test_rounds_of_disjoint_runs_name_the_slow_nodes_one_line_each():
    fleet = Fleet(slow=['10.0.0.3', 'n17'])     # n03 runs under the name the launcher reaches it by
    result, lines = run({'nodes': NODES, 'names': {'n03': '10.0.0.3'}, 'delay': 0.05,
                         'bench': {'launcher': 'mpirun', 'slots_per_host': 8, 'binary': OMIT, 'timeout': 60}}, fleet)
    search = result['search']
    assert sorted(search['culprits']) == ['n03', 'n17'] and search['done'] and search['strategy'] == 'rounds'
    assert len(lines) == search['rounds'] == len(result['lines']) and lines[0].startswith('culprit search round 1: ')
    # Each run over the launcher's names, with the bench arguments (the omit placeholder left out).
    assert any('10.0.0.3' in hosts for hosts in fleet.started) and not any('n03' in hosts for hosts in fleet.started)
    assert all(a['launcher'] == 'mpirun' and a['fail_on_error'] is False and 'binary' not in a for a in fleet.args)
    for number in range(1, search['rounds'] + 1):
        hosts = [h for r in search['runs'] if r['round'] == number for h in r['hosts']]
        assert len(hosts) == len(set(hosts))


def test_a_run_that_cannot_start_or_never_finishes_is_bad_never_cleared():
    fleet = Fleet(lost=['n05'], hang=['n11'])
    result, lines = run({'nodes': NODES, 'timeout': 1, 'delay': 0.05, 'bench': {}}, fleet)
    search = result['search']
    assert 'n05' not in search['cleared'] and 'n11' not in search['cleared']
    assert set(search['culprits']) | set(search['unresolved']) >= {'n05', 'n11'}
    statuses = [r['status'] for r in search['runs'] if set(r['hosts']) & {'n05', 'n11'}]
    assert statuses and set(statuses) == {'failed'}
    # The time the rounds took is what the user waited (20 s a look at the clock here).
    assert search['seconds'] > 0 and len(lines) == search['rounds']


def test_arguments_are_refused_before_anything_runs():
    fleet = Fleet()
    for args, message in (({'nodes': 'n01'}, 'nodes must be a list'),
                          ({'nodes': NODES, 'bench': {'hosts': ['x']}}, 'bench must not set hosts'),
                          ({'nodes': NODES, 'strategy': 'fastest'}, 'strategy must be one of rounds, runs'),
                          ({'nodes': NODES, 'timeout': 'nan'}, 'timeout must be a number from'),
                          ({'nodes': NODES, 'pairs': 'n01-n02'}, 'pairs must be'),
                          ({'nodes': NODES, 'from_facts': 'maybe'}, 'from_facts must be true or false')):
        with pytest.raises(AnsibleActionFail, match=message):
            run(args, fleet)
    assert fleet.args == []
    result, lines = run({'nodes': NODES}, fleet, check=True)
    assert result['skipped'] and fleet.args == [] and lines == []


def test_the_facts_and_the_pairwise_records_are_read_here_not_passed_in(tmp_path):
    """from_facts: the findings of the nodes' facts, as the report judges them, set their nodes
    aside; bench_pairs: the pairs this run's pairwise benchmark judged bad, from its records files
    (hostvars holds only their paths), are named without a search."""
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
    plan = {'hcas': ['mlx5_0'], 'rate_gbps': {'mlx5_0': 400.0}, 'active_rate_gbps': {'mlx5_0': 400.0}, 'model': {}}

    def record(server, client, side, bw=None):
        kept = {'round': 0, 'memory': 'host', 'side': side, 'rail': 0, 'server': server, 'client': client, 'hca': 'mlx5_0',
                'peer_hca': 'mlx5_0', 'status': 'ok', 'counters_delta': {}, 'summary': {'bw_avg_gbps': bw} if bw else None,
                'failure': None}
        if side == 'client':
            kept['results'] = []
        return kept
    records = dict((n, []) for n in NODES)
    for index in range(0, len(NODES), 2):
        server, client = NODES[index], NODES[index + 1]
        records[server].append(record(server, client, 'server'))
        # n04-n05 runs at half the rail's rate: a bad pair.
        records[client].append(record(server, client, 'client', 200.0 if server == 'n04' else 395.0))
    fleet = {'nodes': NODES, 'excluded': {}, 'skipped': None, 'test': 'ib_write_bw'}
    hostvars = dict((n, {'fabric_bench_plan': plan, 'fabric_bench_fleet': fleet, 'fabric_bench_records': [],
                         'fabric_bench_records_file': _bench.write_records(str(tmp_path), n, kept, 'r1'),
                         'fabric_bench_records_run': 'r1'}) for n, kept in records.items())
    findings = [{'host': 'n09', 'severity': 'error', 'layer': 'ib', 'code': 'IB_PORT_DOWN'}]
    with mock.patch('ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._report_stage.from_model',
                    return_value={'findings': findings}) as from_model:
        result, _lines = run({'nodes': NODES, 'from_facts': 'true', 'bench_pairs': True}, Fleet(slow=['n09', 'n13']), hostvars=hostvars)
    model = from_model.call_args[0][0]
    assert model['hosts'] == NODES and set(model['nodes']) == set(NODES)
    search = result['search']
    assert search['known_pairs'] == [['n04', 'n05']]
    assert search['basis'].get('n09') == 'facts' and 'n13' in search['culprits']
    # Off (the string 'false' of -e): nothing is read, nothing set aside.
    with mock.patch('ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._report_stage.from_model') as from_model:
        result, _lines = run({'nodes': NODES, 'from_facts': 'false'}, Fleet(slow=['n09']), hostvars=hostvars)
    assert not from_model.called and result['search']['known_pairs'] == [] and result['search']['basis'] == {'n09': 'runs'}
