# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Caps on records, not only on bytes: every reader of a tool's output, given more records than a
real fabric holds, keeps the first ones up to its cap and counts the rest; the module says so.

60 MiB of sminfo lines (the byte cap is 64 MiB) were 660,000 SM records, an 89 MB module result
and about 2 GB on the controller."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ibdiag, _nccl, _perftest, _roce
from ansible_collections.hpc.gpu_fabric.plugins.modules import ib_fabric_facts
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _fabric
from tests.sim import render
from tests.unit.plugins.modules.utils import run_module

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public')


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return ''.join(line for line in handle if not line.startswith('## '))


def sminfo_lines(count):
    return ''.join('sminfo: sm lid %d sm guid 0x%x, activity count 6881 priority 0 state 3 SMINFO_MASTER\n'
                   % (1 + index % 0xBFFF, 0x2c90200259201 + index) for index in range(count))


def smir_records(count):
    return ''.join('SMInfoRecord dump:\n\tRID\n\t\tLID...................%d\n\tSMInfo dump:\n\t\tGUID..................0x%016x\n'
                   '\t\tSM_Key................0x0000000000000000\n\t\tActCount..............1\n\t\tPriority..............0\n'
                   '\t\tSMState...............3\n' % (1 + index % 0xBFFF, index + 1) for index in range(count))


def test_the_caps_are_a_subnets_size():
    # 0xBFFF unicast LIDs (IBTA Vol 1, 4.1.3): the largest subnets (~48k-64k ports) fit, more does not.
    assert _ibdiag.NODES_MAX == 49151 and _ibdiag.LINKS_MAX >= 6 * _ibdiag.NODES_MAX
    assert 2 <= _ibdiag.SMS_MAX <= 1024 and _nccl.RANKS_MAX >= _ibdiag.NODES_MAX


@pytest.mark.parametrize('parse, text, cap', [
    (_ibdiag.parse_sminfo, sminfo_lines(_ibdiag.SMS_MAX + 5000), _ibdiag.SMS_MAX),
    (_ibdiag.parse_saquery_sminfo, smir_records(_ibdiag.SMS_MAX + 500), _ibdiag.SMS_MAX),
], ids=['sminfo', 'saquery_smir'])
def test_sm_records_past_the_cap_are_counted_not_kept(parse, text, cap):
    parsed = parse(text)
    marker = 'SMINFO_MASTER\n' if 'sminfo' in text[:7] else 'SMInfoRecord'
    assert len(parsed['sms']) == cap and parsed['dropped'] == {'sms': len(text.split(marker)) - 1 - cap}
    # The first ones are the ones kept, in order.
    assert [sm['lid'] for sm in parsed['sms'][:3]] == [1, 2, 3]


def test_error_lines_past_the_cap_are_counted_not_kept():
    parsed = _ibdiag.parse_sminfo('ibwarn: [1] mad_rpc: _do_madrpc failed; dport (Lid 7)\n' * 10000)
    assert len(parsed['errors']) == _ibdiag.ERRORS_MAX and parsed['dropped'] == {'errors': 10000 - _ibdiag.ERRORS_MAX}


@pytest.mark.parametrize('tool, parse, name', [
    ('iblinkinfo', _ibdiag.parse_iblinkinfo, 'linpack_edr_sb7700.txt'),
    ('ibnetdiscover', _ibdiag.parse_ibnetdiscover, 'infiniband_exporter_ports_edr.txt'),
    ('ibnetdiscover', _ibdiag.parse_ibnetdiscover, 'rdma_core_man_voltaire_1x.txt'),
])
def test_port_lines_past_the_cap_are_counted_not_kept(monkeypatch, tool, parse, name):
    text = fixture(tool, name)
    whole = parse(text)
    assert len(whole['links']) > 4 and not whole['dropped']
    monkeypatch.setattr(_ibdiag, 'LINKS_MAX', 4)
    capped = parse(text)
    assert capped['links'] == whole['links'][:4]
    assert capped['dropped']['links'] >= len(whole['links']) - 4 and capped['unparsed'] == whole['unparsed']


@pytest.mark.parametrize('tool, parse, name', [
    ('iblinkinfo', _ibdiag.parse_iblinkinfo, 'linpack_edr_sb7700.txt'),
    ('ibnetdiscover', _ibdiag.parse_ibnetdiscover, 'rdma_core_man_voltaire_1x.txt'),
])
def test_nodes_past_the_cap_are_counted_not_kept(monkeypatch, tool, parse, name):
    text = fixture(tool, name)
    whole = parse(text)
    monkeypatch.setattr(_ibdiag, 'NODES_MAX', 3)
    capped = parse(text)
    assert len(capped['nodes']) <= 3 < len(whole['nodes'])
    assert sum(capped['dropped'].values()) > 0
    # Every link kept is between nodes kept.
    for link in capped['links']:
        assert link['a']['node'] in capped['nodes'] and (link['b'] is None or link['b']['node'] in capped['nodes'])
    topology = _ibdiag.topology(**{'linkinfo' if tool == 'iblinkinfo' else 'netdiscover': capped})
    assert topology['dropped'] == {tool: capped['dropped']}


def test_unread_lines_are_counted_and_a_few_kept():
    junk = 'not a line of the tool\n' * 100000
    for parse in (_ibdiag.parse_iblinkinfo, _ibdiag.parse_ibnetdiscover, _ibdiag.parse_sminfo, _ibdiag.parse_saquery_sminfo):
        parsed = parse(junk)
        assert len(parsed['unparsed']) == _ibdiag.UNREAD_KEPT and parsed['unparsed_count'] == 100000, parse
    unread = {}
    assert _ibdiag.parse_perfquery(junk, unread) == [] and unread['count'] == 100000 and len(unread['lines']) == _ibdiag.UNREAD_KEPT


def test_perfquery_blocks_past_the_cap_are_counted_not_kept(monkeypatch):
    one = fixture('perfquery', 'infiniband_diags_16_rhel75_x.txt')
    assert 'Lid 10 port' in one
    text = ''.join(one.replace('Lid 10 port', 'Lid %d port' % lid) for lid in range(1, 6))
    whole = _ibdiag.parse_perfquery(text)
    assert [block['lid'] for block in whole] == [1, 2, 3, 4, 5]
    monkeypatch.setattr(_ibdiag, 'LINKS_MAX', 2)
    unread = {}
    capped = _ibdiag.parse_perfquery(text, unread)
    assert capped == whole[:2] and unread['dropped'] == {'ports': 3}


def test_a_ports_second_perfquery_block_is_counted_not_kept():
    """A paste repeated 70,000 times was 70,000 blocks of one port (28 MB of facts)."""
    one = fixture('perfquery', 'infiniband_diags_16_rhel75_x.txt')
    unread = {}
    blocks = _ibdiag.parse_perfquery(one * 1000, unread)
    assert blocks == _ibdiag.parse_perfquery(one) and unread['dropped'] == {'ports': 999}


def test_ib_fabric_facts_over_the_sm_cap_is_partial_small_and_named(monkeypatch, tmp_path):
    """The probe's case at a sixth of its size: 110,000 SM records in sminfo.txt (10 MB)."""
    root = str(tmp_path / 'node')
    render.render(render.load_profile('homelab_cx4'), root)
    logs = tmp_path / 'logs'
    logs.mkdir()
    (logs / 'sminfo.txt').write_text(sminfo_lines(110000))
    (logs / 'saquery_smir.txt').write_text(smir_records(_ibdiag.SMS_MAX + 10))
    result, failed = run_module(ib_fabric_facts.main, {'root': root, 'from_log': str(logs)}, monkeypatch)
    assert not failed, result
    facts = result['ansible_facts']['gpu_fabric_ib_fabric']
    assert len(facts['sm']['sms']) == 2 * _ibdiag.SMS_MAX
    assert facts['unread']['dropped'] == {'sminfo': {'sms': 110000 - _ibdiag.SMS_MAX}, 'saquery': {'sms': 10}}
    assert facts['status'] == 'partial' and 'not read' in facts['reason']
    assert len(json.dumps(result)) < 200000      # 89 MB at 660,000 records
    # The report names it (FABRIC_INPUT_UNREAD), the count and the cap first.
    found = _fabric.unread_findings(facts, 'n1')
    assert len(found) == 1 and '%d SM record(s) past the first %d not kept' % (110000 - _ibdiag.SMS_MAX, _ibdiag.SMS_MAX) \
        in found[0]['cause'], found


# ------------------------------------------------------------------------------ nccl-tests, perftest

def test_nccl_rows_and_ranks_past_the_cap_are_counted_not_kept(monkeypatch):
    text = fixture('nccl_tests', 'gcm_a100_allreduce_2node_16gpu.txt')
    whole = _nccl.parse_text(text)
    assert len(whole['results']) > 3 and len(whole['ranks']) > 3 and 'dropped' not in whole
    monkeypatch.setattr(_nccl, 'RESULTS_MAX', 3)
    monkeypatch.setattr(_nccl, 'RANKS_MAX', 2)
    capped = _nccl.parse_text(text)
    assert capped['results'] == whole['results'][:3] and capped['ranks'] == whole['ranks'][:2]
    assert capped['dropped'] == {'results': len(whole['results']) - 3, 'ranks': len(whole['ranks']) - 2}
    reasons = [p['reason'] for p in capped['problems']]
    assert any(r.startswith('%d more results past the first 3 not kept' % (len(whole['results']) - 3)) for r in reasons), reasons


def test_nccl_problems_past_the_cap_are_counted_not_kept():
    text = fixture('nccl_tests', 'gcm_a100_allreduce_1node_8gpu.txt')
    bad = '# Avg bus bandwidth    : .\n' * 10000
    parsed = _nccl.parse_text(bad + text)
    assert len(parsed['problems']) <= _nccl.PROBLEMS_MAX and parsed['dropped']['problems'] > 9000
    assert 'more problems past the first' in parsed['problems'][-1]['reason']


def test_nccl_json_rows_past_the_cap_are_counted_not_kept(monkeypatch):
    row = {'size': 8, 'count': 2, 'type': 'float', 'redop': 'sum', 'root': -1,
           'out_of_place': {'time': 10.0, 'alg_bw': 0.0, 'bus_bw': 0.0, 'nwrong': 0},
           'in_place': {'time': 10.0, 'alg_bw': 0.0, 'bus_bw': 0.0, 'nwrong': 0}}
    doc = {'config': {}, 'results': [row] * 20}
    whole = _nccl.parse_json(json.dumps(doc))
    monkeypatch.setattr(_nccl, 'RESULTS_MAX', 5)
    capped = _nccl.parse_json(json.dumps(doc))
    assert len(whole['results']) == 20 and 'dropped' not in whole
    assert capped['results'] == whole['results'][:5] and capped['dropped'] == {'results': 15}
    assert capped['problems'][-1]['reason'].startswith('15 more results past the first 5 not kept')


@pytest.mark.parametrize('name', ['aks_ib_write_bw_hdr_sweep_gbits.txt', 'dgx_spark_ib_write_bw_run_infinitely_roce.txt'])
def test_perftest_rows_past_the_cap_are_counted_not_kept(monkeypatch, name):
    text = fixture('perftest', name)
    whole = _perftest.parse_output(text)
    assert len(whole['results']) > 2 and 'dropped' not in whole
    monkeypatch.setattr(_perftest, 'RESULTS_MAX', 2)
    capped = _perftest.parse_output(text)
    assert capped['results'] == whole['results'][:2] and capped['dropped'] == {'results': len(whole['results']) - 2}
    assert capped['tool_warnings'][-1].startswith('hpc.gpu_fabric: %d more results past the first 2' % (len(whole['results']) - 2))


def test_perftest_warnings_past_the_cap_are_counted_not_kept():
    text = fixture('perftest', 'aks_ib_write_bw_hdr_sweep_gbits.txt')
    noise = ''.join(' WARNING: BW peak won\'t be measured in this run %d.\n' % index for index in range(20000))
    parsed = _perftest.parse_output(noise + text)
    assert len(parsed['tool_warnings']) == _perftest.WARNINGS_MAX + 1 and parsed['dropped'] == {'tool_warnings': 19950}
    assert parsed['tool_warnings'][-1] == 'hpc.gpu_fabric: 19950 more tool_warnings past the first 50 not kept (module_utils/_perftest.py)'
    assert parsed['results'] == _perftest.parse_output(text)['results']


def test_dcb_ets_keeps_only_the_eight_traffic_classes():
    text = 'tc-tsa ' + ' '.join('%d:ets' % tc for tc in range(100000)) + '\ntc-bw ' + ' '.join('%d:1' % tc for tc in range(100000))
    prio_tc, tsa, bw = _roce.parse_dcb_ets(text)
    assert sorted(tsa) == list(range(8)) and sorted(bw) == list(range(8))


def test_a_collective_judged_on_capped_records_says_so(monkeypatch, tmp_path):
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
    from ansible_collections.hpc.gpu_fabric.plugins.modules import collective_bench
    log = tmp_path / 'run.log'
    log.write_text(fixture('nccl_tests', 'gcm_a100_allreduce_1node_8gpu.txt'))
    monkeypatch.setattr(_nccl, 'RESULTS_MAX', 3)
    result, failed = run_module(collective_bench.main, {'from_log': str(log)}, monkeypatch)
    assert not failed, result
    assert len(result['results']) == 3 and result['dropped']['results'] > 0
    verdict = _collective.judge(result, 100.0)
    assert any(r.startswith('judged on the records kept: %d results past the caps' % result['dropped']['results'])
               for r in verdict['reasons']), verdict


def test_a_pair_judged_on_capped_rows_says_so(monkeypatch):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
    from tests.unit.plugins.plugin_utils.test__bench import _mesh
    monkeypatch.setattr(_perftest, 'RESULTS_MAX', 2)
    parsed = _perftest.parse_output(fixture('perftest', 'aks_ib_write_bw_hdr_sweep_gbits.txt'))
    nodes = _mesh()
    record = [r for r in nodes['c']['records'] if r['side'] == 'client'][0]
    record['warnings'] = parsed['tool_warnings']
    pair = [p for p in _bench.report(nodes, {})['pairs'] if p['client'] == 'c'][0]
    assert parsed['tool_warnings'][-1] in pair['reasons']


def test_long_fields_are_cut_so_that_the_record_caps_bound_the_result():
    """A NodeDescription is 64 bytes, a host name at most 253 characters: a field of a MB is cut, so that
    the caps on records also bound the bytes of the result."""
    text = fixture('iblinkinfo', 'linpack_edr_sb7700.txt')
    line = next(x for x in text.splitlines() if '==(' in x and '"' in x)
    start = line.index('"') + 1
    huge = line[:start] + 'x' * (1 << 20) + line[start:]
    parsed = _ibdiag.parse_iblinkinfo(huge)
    assert parsed['links'], parsed['unparsed']
    descs = [n['desc'] for n in parsed['nodes'].values()] + [e['desc'] for link in parsed['links'] for e in (link['a'], link['b']) if e]
    assert max(len(d or '') for d in descs) <= _ibdiag.DESC_MAX and len(json.dumps(parsed)) < 10000
    rank = '#  Rank  0 Group  0 Pid  1 on %s device  0 [0x07] NVIDIA A100-SXM4-40GB\n' % ('h' * (1 << 20))
    ranks = _nccl.parse_text(rank)['ranks']
    assert len(ranks) == 1 and len(ranks[0]['host']) == _nccl.HOST_TEXT_MAX


def test_a_ports_normal_and_extended_perfquery_blocks_are_both_kept():
    # A ticket often holds both `perfquery` and `perfquery -x` of one port: two reads, not a repeated paste.
    extended = fixture('perfquery', 'infiniband_diags_16_rhel75_x.txt')
    normal = extended.replace('# Port extended counters:', '# Port counters:')
    assert normal != extended
    unread = {}
    blocks = _ibdiag.parse_perfquery(normal + extended, unread)
    assert len(blocks) == 2 * len(_ibdiag.parse_perfquery(extended)) and not unread.get('dropped')


def test_nccl_cap_notes_never_overwrite_each_other_or_a_problem_uncounted():
    parsed = {'problems': [{'line': i, 'text': 'x', 'reason': 'r'} for i in range(_nccl.PROBLEMS_MAX - 1)],
              'dropped': {'results': 3, 'ranks': 2}}
    _nccl._dropped_problems(parsed)
    notes = [p['text'] for p in parsed['problems'] if p['line'] is None]
    assert len(parsed['problems']) == _nccl.PROBLEMS_MAX and notes == ['problems', 'ranks', 'results']
    # Two problems gave way to the three notes, and are counted.
    assert parsed['dropped']['problems'] == 2
