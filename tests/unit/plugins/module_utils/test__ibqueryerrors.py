# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""ibqueryerrors over the subnet: the parser on a real output (tests/fixtures/public/ibqueryerrors/) and
on the variants ibqueryerrors.c prints, the window and grace rules (module_utils/_rates.py), the
findings on the simulated fat tree (plugin_utils/diagnosis/_fabric.py), and offline on the saved outputs
judging as the live run did."""

from __future__ import annotations

import os
import tempfile

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ibdiag, _rates
from ansible_collections.hpc.gpu_fabric.plugins.modules import ib_fabric_facts as module
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.bench import diagnosis_accuracy as accuracy
from tests.sim import fabric, tools_ibdiags

FIXTURE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public', 'ibqueryerrors',
                       'linux_rdma_2021_sx6036_ceph_quoted.txt')


def body():
    with open(FIXTURE) as handle:
        lines = handle.read().splitlines(True)
    assert lines[0].startswith('## source: https://lore.kernel.org/') or lines[0].startswith('## source: ')
    assert lines[1].startswith('## note: ')
    return ''.join(line for line in lines if not line.startswith(('## source:', '## note:')))


def test_real_output_quoted_in_a_mail():
    parsed = _ibdiag.parse_ibqueryerrors(body())
    assert parsed['unparsed'] == [] and parsed['unparsed_count'] == 0 and parsed['errors'] == []
    # The summary counts 14 ports with errors: every one of them is read.
    assert parsed['summary']['bad_ports'] == len(parsed['ports']) == 14 and parsed['summary']['complete'] is True
    assert len(parsed['aggregates']) == 1 and parsed['aggregates'][0]['counters']['link_downed'] == 48
    ports = dict(((p['guid'], p['port']), p) for p in parsed['ports'])
    port5 = ports[('0x0002c903006e29b0', 5)]
    assert port5['switch'] is True and port5['desc'] == 'MF0;ys23ib4:SX6036/U1' and port5['node_guid'] == '0x0002c903006e29b0'
    assert port5['counters']['symbol_error'] == 65535 and port5['counters']['link_error_recovery'] == 8
    assert port5['saturated'] == ['symbol_error']          # 16 bits at their maximum
    ca = ports[('0x7cfe900300179b31', 1)]
    assert ca['switch'] is False and ca['desc'] == 'dl380g7 mlx4_0' and ca['saturated'] == ['port_xmit_wait']
    assert ports[('0x0002c903006e29b0', 0)]['counters'] == {'port_xmit_wait': 76959324}


def test_variants_extended_data_report_port_suppressed_and_errors():
    text = '\n'.join([
        'ibwarn: [1203] query_and_dump: PortXmitDiscardDetails query failed on HOSTXXX, Lid 1051 port 1',
        'Errors for 0x248a070300f9a2c0 "MF0;leaf01:MQM8700/U1"',
        '   GUID 0x248a070300f9a2c0 port 7: [SymbolErrorCounter == 70000 (68.359K)] [PortXmitData == 123456 (482.250KB)]'
        ' [PortLocalPhysicalErrors == 3]',
        '       Link info:     12   7[  ] ==( 4X       53.125 Gbps Active/  LinkUp)==>  0x0c42a10300d4e6f1     40    1[  ] "gpu-01 mlx5_0" ( )',
        'Data Counters for 0x248a070300f9a2c0 "MF0;leaf01:MQM8700/U1"',
        '   GUID 0x248a070300f9a2c0 port 8: [PortXmitData == 1 (4.000B)]',
        '   GUID 0x248a070300f9a2c0 port 9: [SymbolErrorCounter == 5] [LinkDown',
        '',
        '## Summary: 2 nodes checked, 1 bad nodes found',
        '##          80 ports checked, 1 ports have errors beyond threshold',
        '## Thresholds: SymbolErrorCounter=10',
        '##          2 PMA query failures',
        '## Suppressed: PortXmitWait VL15Dropped',
    ])
    parsed = _ibdiag.parse_ibqueryerrors(text)
    port7 = parsed['ports'][0]
    assert port7['port'] == 7 and port7['lid'] == 12
    assert port7['counters'] == {'symbol_error': 70000, 'port_xmit_data': 123456}
    assert port7['saturated'] == [] and port7['other'] == {'PortLocalPhysicalErrors': 3}   # extended: 64 bits
    assert [p['port'] for p in parsed['ports']] == [7, 8]
    assert parsed['unparsed_count'] == 1 and 'LinkDown' in parsed['unparsed'][0]['text']    # the cut line is named
    assert parsed['errors'][0].startswith('ibwarn:')
    summary = parsed['summary']
    assert summary['suppressed'] == ['PortXmitWait', 'VL15Dropped'] and summary['failures'] == 2
    # A threshold file or a failed query: a port not listed is not known to have read 0.
    assert summary['complete'] is False


def test_garbage_is_counted_not_guessed():
    parsed = _ibdiag.parse_ibqueryerrors('hello\n## nonsense\nGUID 0xzz port 1: [A == 1]\n')
    assert parsed['ports'] == [] and parsed['unparsed_count'] == 3 and parsed['summary'] is None


def test_window_grace_and_retraining():
    before, after = {'symbol_error': 0, 'link_downed': 0}, {'symbol_error': 300, 'link_downed': 1}
    inside = _rates.window(before, after, 10, 425, uptime_s=180, grace_min=10)
    assert inside['phase'] == 'bring_up' and inside['retrains'] == 1
    assert _rates.window(before, after, 10, 425, uptime_s=3600, grace_min=10)['phase'] == 'steady'
    assert _rates.window(before, after, 10, 425, uptime_s=None)['phase'] == 'steady'      # unknown: no grace
    again = _rates.window(before, {'symbol_error': 300, 'link_downed': 3}, 10, 425, uptime_s=180, grace_min=10)
    assert again['phase'] == 'steady' and again['retrains_per_min'] == 18.0                 # retraining, even in grace
    saturated = _rates.window({'symbol_error': 65535}, {'symbol_error': 65535}, 10, 425, saturated=['symbol_error', 'port_xmit_wait'])
    assert saturated['verdicts'] == [] and saturated['saturated'] == ['symbol_error']
    assert _rates.window({'symbol_error': 9}, {'symbol_error': 2}, 10)['cleared'] == ['symbol_error']


def test_grace_numbers_agree_and_bad_values_refused():
    assert module._LINK_GRACE_MIN == _rates.LINK_GRACE_MIN and module._LINK_GRACE_MAX_MIN == _rates.LINK_GRACE_MAX_MIN
    base = {'interval': 5.0, 'timeout': 120}
    assert module.params_problem(dict(base, link_grace=10.0)) is None
    for bad in (float('nan'), float('inf'), -1.0, 1441.0):
        assert 'link_grace' in module.params_problem(dict(base, link_grace=bad))


def _diagnosed(faults, grace_min=10):
    base = accuracy.node_facts('nvidia_h100_8x_ndr')
    model = fabric.model(faults=faults)
    nodes = dict((name, fabric.node_facts(model, base, name)) for name in model['hosts'])
    with tempfile.TemporaryDirectory() as directory:
        path = fabric.write(model, directory + '/fabric.json')
        nodes[sorted(nodes)[0]]['fabric'] = tools_ibdiags.fabric_facts(path, [1], grace_min=grace_min)
    return [f for f in _diagnose.diagnose(nodes) if f['code'] in ('IB_SUBNET_ERRORS', 'FABRIC_ERROR_RATE', 'FABRIC_LINK_FLAPPING')]


def test_switch_port_off_the_tested_routes_is_named_on_its_link():
    found = _diagnosed(('subnet_port_errors',))
    assert [(f['code'], f['severity']) for f in found] == [('IB_SUBNET_ERRORS', 'error')]   # not FABRIC_ERROR_RATE again
    item = found[0]
    assert item['at'] == [['link', '0x0000000050000002/5', '0x0000000051000002/37']]
    assert item['evidence']['source'] == 'ibqueryerrors' and item['evidence']['increase'] == {'symbol_error': 2000}


def test_bring_up_trap_is_information_on_no_path():
    found = _diagnosed(('bring_up_errors',))
    assert [(f['code'], f['severity']) for f in found] == [('IB_SUBNET_ERRORS', 'info')]
    assert found[0]['at'][0][0] == 'bring_up' and found[0]['evidence']['phase'] == 'bring_up'
    # With no grace window the same rises are a fault: a retrain (FABRIC_LINK_FLAPPING).
    assert [f['code'] for f in _diagnosed(('bring_up_errors',), grace_min=0)] == ['FABRIC_LINK_FLAPPING']


def test_flapping_link_stays_flapping_once():
    found = _diagnosed(('flapping_link',))
    assert [f['code'] for f in found] == ['FABRIC_LINK_FLAPPING'] and found[0]['evidence']['retrains'] == 1


def test_ibqueryerrors_missing_is_not_read_and_the_sweep_stands_for_it(monkeypatch):
    real = tools_ibdiags.InProcessRunner.run

    def run(self, tool, args=(), log_name=None):
        if tool == 'ibqueryerrors':
            self.tools[tool] = 'not installed'
            return None
        return real(self, tool, args, log_name)
    monkeypatch.setattr(tools_ibdiags.InProcessRunner, 'run', run)
    found = _diagnosed(('subnet_port_errors',))
    assert [f['code'] for f in found] == ['FABRIC_ERROR_RATE']


def _findings_of(fabric_facts, model, base):
    nodes = dict((name, fabric.node_facts(model, base, name)) for name in model['hosts'])
    nodes[sorted(nodes)[0]]['fabric'] = fabric_facts
    return sorted((f['code'], f['severity'], f['subject'], str(f['at']), str(sorted(f['evidence']['increase'].items())))
                  for f in _diagnose.diagnose(nodes) if f['code'] in ('IB_SUBNET_ERRORS', 'FABRIC_LINK_FLAPPING', 'FABRIC_ERROR_RATE'))


@pytest.mark.parametrize('faults', [('subnet_port_errors',), ('bring_up_errors',), ('flapping_link', 'subnet_port_errors')])
def test_offline_on_the_saved_outputs_judges_as_the_live_run(faults):
    base = accuracy.node_facts('nvidia_h100_8x_ndr')
    model = fabric.model(faults=faults)
    with tempfile.TemporaryDirectory() as directory:
        path = fabric.write(model, directory + '/fabric.json')
        saved = os.path.join(directory, 'saved')
        os.mkdir(saved)
        live = tools_ibdiags.fabric_facts(path, [1], save_to=saved)
        assert sorted(os.listdir(saved)) == sorted(['iblinkinfo.txt', 'ibnetdiscover.txt', 'sminfo.txt', 'saquery_smir.txt',
                                                    'perfquery.1.txt', 'perfquery.2.txt', 'ibqueryerrors.1.txt',
                                                    'ibqueryerrors.2.txt', 'uptime.txt', 'read_at.txt'])
        runner = module.Runner(None, 10, saved)
        offline = {'status': 'ok', 'reason': '', 'local': []}
        offline.update(module.discover(None, runner, [], 1, [], None, 10))
        offline['tools'] = dict(runner.tools)
        module.judge_status(offline, runner.tools)
    assert offline['status'] == 'ok', offline['reason']
    assert offline['subnet']['uptime_s'] == live['subnet']['uptime_s']
    assert [r['read_at'] for r in offline['subnet']['reads']] == [r['read_at'] for r in live['subnet']['reads']]
    found_live, found_offline = _findings_of(live, model, base), _findings_of(offline, model, base)
    assert found_live == found_offline and any(code == 'IB_SUBNET_ERRORS' for code, *_rest in found_live)


def test_the_port_explains_only_symptoms_whose_route_crosses_it():
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _fabric, _findings, _linker
    base = accuracy.node_facts('nvidia_h100_8x_ndr')
    nodes = accuracy.fabric_nodes(('subnet_port_errors',), base)
    root = [f for f in _diagnose.diagnose(nodes) if f['code'] == 'IB_SUBNET_ERRORS'][0]
    routes = _fabric.routes(nodes)
    # mlx5_2 sits on leaf-2 (the faulted up-link's leaf), mlx5_0 on leaf-1: a pair between them crosses
    # both leaves' up-links; the pairs of one rail stay on their leaf and cross none.
    across = _linker._with_routes([('hca', 'gpu-01', 'mlx5_2'), ('hca', 'gpu-02', 'mlx5_0')], routes)
    same_leaf = _linker._with_routes([('hca', 'gpu-01', 'mlx5_2'), ('hca', 'gpu-02', 'mlx5_2')], routes)
    assert _findings.on_path(root['at'], across) and not _findings.on_path(root['at'], same_leaf)
    assert _findings.explains('IB_SUBNET_ERRORS', {'code': 'BENCH_PAIR_LOW', 'evidence': {}})


def test_without_ibqueryerrors_the_sweep_keeps_the_grace_too(monkeypatch):
    real = tools_ibdiags.InProcessRunner.run

    def run(self, tool, args=(), log_name=None):
        if tool == 'ibqueryerrors':
            self.tools[tool] = 'not installed'
            return None
        return real(self, tool, args, log_name)
    monkeypatch.setattr(tools_ibdiags.InProcessRunner, 'run', run)
    found = _diagnosed(('bring_up_errors',))
    assert [(f['code'], f['severity'], f['evidence']['source']) for f in found] == [('IB_SUBNET_ERRORS', 'info', 'perfquery')]


def test_the_fabric_view_draws_the_subnet_port():
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _fabric
    base = accuracy.node_facts('nvidia_h100_8x_ndr')
    nodes = accuracy.fabric_nodes(('subnet_port_errors',), base)
    found = _diagnose.diagnose(nodes)
    links = _fabric.summary(nodes, found)['links']
    # As FABRIC_ERROR_RATE's port: a line of its own beside the switch links, with the finding's severity.
    assert [link['health'] for link in links if link['label'].startswith('IB_SUBNET_ERRORS: MF0;leaf-2:MQM9700/U1 port 37')] == ['error']


def test_suppressed_counters_leave_the_read_incomplete():
    text = '## Summary: 1 nodes checked, 0 bad nodes found\n##          8 ports checked, 0 ports have errors beyond threshold\n' \
           '## Thresholds: \n## Suppressed: SymbolErrorCounter\n'
    assert _ibdiag.parse_ibqueryerrors(text)['summary']['complete'] is False
    assert _ibdiag.parse_ibqueryerrors(text.replace(' SymbolErrorCounter', ''))['summary']['complete'] is True
