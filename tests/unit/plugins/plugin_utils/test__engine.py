# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The diagnosis engine orders the rules from what they declare, hands each only the codes it
reads, and refuses a rule that makes a code it does not declare; the code lists other modules
read are the registry's roles."""

from __future__ import annotations

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _engine, _findings, _fleet, _linker
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import RULES, Fleet, Rule
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage


def _fleet_of(nodes=None):
    return Fleet(nodes or {}, nodes or {}, dict((host, {}) for host in nodes or {}))


def test_a_rule_runs_after_every_rule_that_produces_what_it_reads():
    order = [item.name for item in _engine.ordered()]
    assert len(order) == len(RULES) >= 15
    for position, item in enumerate(_engine.ordered()):
        before = set(_engine.ordered()[:position])
        for other in RULES:
            if set(other.produces) & set(item.reads) and other is not item:
                assert other in before, (item.name, other.name)
    # The fleet rule reads the port, GPUDirect RDMA and MTU findings: it runs after their rules.
    assert order.index('_fleet.consistency') > max(order.index(name) for name in ('_node.port_states', '_node.gpudirect', '_node.fleet_mtu'))


def test_the_order_comes_from_the_declarations_not_the_names():
    seen = []
    first = Rule('a_reads', lambda fleet, found: seen.append([f['code'] for f in found]) or [], (_findings.FLEET_SPLIT,),
                 reads=(_findings.MTU_MISMATCH,))
    second = Rule('z_makes', lambda fleet, found: [_findings.finding(_findings.MTU_MISMATCH, 'h', 'mlx5_0', {}, 'x')],
                  (_findings.MTU_MISMATCH,))
    noise = Rule('b_other', lambda fleet, found: seen.append(found) or [_findings.finding(_findings.HOST_LOST, 'h', 'node', {}, 'x')],
                 (_findings.HOST_LOST,))
    assert [r.name for r in _engine.ordered([first, second, noise])] == ['b_other', 'z_makes', 'a_reads']
    found = _engine.run_rules(_fleet_of(), [first, second, noise])
    # Each rule is handed only the findings of the codes it reads.
    assert seen == [[], ['MTU_MISMATCH']] and [f['code'] for f in found] == ['HOST_LOST', 'MTU_MISMATCH']


def test_a_cycle_and_an_undeclared_code_are_refused():
    one = Rule('one', lambda fleet, found: [], (_findings.FLEET_SPLIT,), reads=(_findings.MTU_MISMATCH,))
    two = Rule('two', lambda fleet, found: [], (_findings.MTU_MISMATCH,), reads=(_findings.FLEET_SPLIT,))
    with pytest.raises(ValueError, match='cycle'):
        _engine.ordered([one, two])
    stray = Rule('stray', lambda fleet, found: [_findings.finding(_findings.HOST_LOST, 'h', 'node', {}, 'x')], (_findings.MTU_MISMATCH,))
    with pytest.raises(ValueError, match='does not declare: HOST_LOST'):
        _engine.run_rules(_fleet_of(), [stray])


def test_every_code_a_rule_reads_is_one_a_rule_produces():
    # BENCH_DEVICE_UNEXPLAINED is the linker's (unexplained_findings), made before the late rules run.
    produced = set(code for item in RULES for code in item.produces) | {'BENCH_DEVICE_UNEXPLAINED'}
    assert set(code for item in RULES for code in item.reads) <= produced


def test_the_code_lists_are_the_registrys_roles():
    assert _fleet.PORT_CODES == _findings.codes_with('port') and set(_fleet.OWNED_PORT_CODES) == {'IB_PORT_DOWN', 'IB_RATE_DEGRADED'}
    assert set(_fleet.NO_RDMA_CODES) == {'GDR_NO_RDMA_NIC', 'HOST_NOTHING_TO_CHECK'} <= set(_fleet.GDR_CODES)
    assert _fleet.MTU_CODES == ('MTU_MISMATCH',)
    assert set(_linker.PAIR_SYMPTOMS) == {'BENCH_PAIR_FAILED', 'BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_LOW', 'BENCH_GPU_MEMORY_FAILED'}
    assert set(_report_stage.NOT_CHECKED) == {'HOST_TASK_FAILED', 'HOST_UNREACHABLE', 'HOST_LOST'}
    with pytest.raises(ValueError):
        _findings.codes_with('no_such_role')


def test_a_new_code_with_a_role_is_in_its_list():
    code = 'TEST_PORT_SYMPTOM'
    try:
        _findings._register(code, 'ib', 'warning', 'a test code', 'nothing', roles=('port', 'pair_symptom'))
        assert code in _findings.codes_with('port') and code in _findings.codes_with('pair_symptom')
        assert code not in _findings.codes_with('port_owned')
        with pytest.raises(ValueError, match='roles'):
            _findings._register('TEST_BAD_ROLE', 'ib', 'warning', 'a test code', 'nothing', roles=('no_such_role',))
    finally:
        _findings.REGISTRY.pop(code, None)
    assert code not in _findings.codes_with('port')


@pytest.mark.parametrize('split', [False, True])
def test_a_stage_refused_for_a_split_run_is_no_nodes_doing(split):
    """BENCH_NOT_RUN / COLLECTIVE_NOT_RUN of a run that holds part of the nodes (a job slice, a --limit) sit on the
    run alone: a node without an RDMA device explains a benchmark that could not run, not one the run refused."""
    root = _findings.finding(_findings.GDR_NO_RDMA_NIC, 'n1', 'node', {}, 'no RDMA device', at=[('node', 'n1')])
    evidence = dict({'skipped': 'why', 'excluded': {}}, **({'split': True} if split else {}))
    symptoms = [_findings.finding(_findings.BENCH_NOT_RUN, None, 'pairwise', evidence, 'not run', test='ib_write_bw', path=[('run',)]),
                _findings.finding(_findings.COLLECTIVE_NOT_RUN, None, 'collective', dict(evidence), 'not run')]
    findings = _linker.link_causes(_linker.complete_paths([root] + symptoms, {'n1': {}}))
    by_code = dict((f['code'], f) for f in findings)
    assert by_code[_findings.BENCH_NOT_RUN]['explained_by'] == (None if split else root['id'])
    # Split: the run alone is on the path of either; otherwise every node the run knows is.
    for code in (_findings.BENCH_NOT_RUN, _findings.COLLECTIVE_NOT_RUN):
        nodes_on_path = [tuple(place) for place in by_code[code]['path'] or [] if tuple(place)[0] == 'node']
        assert nodes_on_path == ([] if split else [('node', 'n1')]), (code, by_code[code]['path'])
