# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fabric rules (plugin_utils/diagnosis/_fabric.py), the counter-rate rules (module_utils/_rates.py) and
the fabric's HTML view, on the simulated fat tree (tests/sim/fabric.py) and on hand-made facts."""

from __future__ import annotations

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rates
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _fabric
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html, _report
from tests.bench import diagnosis_accuracy


@pytest.fixture(scope='module')
def base():
    return diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')


def roots(found):
    return sorted(set((f['code'], f['host']) for f in found if f['explained_by'] is None and f['severity'] != 'info'))


def test_healthy_pod_has_no_finding_above_info(base):
    found = _diagnose.diagnose(diagnosis_accuracy.fabric_nodes((), base))
    assert [f for f in found if f['severity'] != 'info'] == []


@pytest.mark.parametrize('fault,code,host', [
    ('degraded_switch_link', 'FABRIC_LINK_DEGRADED', None),
    ('missing_uplink', 'FABRIC_UPLINKS_ASYMMETRIC', None),
    ('sm_absent', 'FABRIC_SM_ABSENT', None),
    ('sm_duplicated', 'FABRIC_SM_MULTIPLE_MASTERS', None),
    ('flapping_link', 'FABRIC_LINK_FLAPPING', 'gpu-05'),
])
def test_each_fabric_fault_is_the_one_root(base, fault, code, host):
    found = _diagnose.diagnose(diagnosis_accuracy.fabric_nodes((fault,), base))
    assert roots(found) == [(code, host)]


def test_two_masters_explain_the_split_views(base):
    found = _diagnose.diagnose(diagnosis_accuracy.fabric_nodes(('sm_duplicated',), base))
    by_code = dict((f['code'], f) for f in found)
    assert by_code['FABRIC_SM_DISAGREE']['explained_by'] == by_code['FABRIC_SM_MULTIPLE_MASTERS']['id']
    assert sorted(by_code['FABRIC_SM_DISAGREE']['evidence']['views']) == ['1', '2']


def test_flapping_port_explains_the_hosts_counter_finding(base):
    nodes = diagnosis_accuracy.fabric_nodes(('flapping_link',), base)
    port = [d for d in nodes['gpu-05']['ib']['devices'] if d['name'] == 'mlx5_3'][0]['ports'][0]
    port['counters']['link_downed'] = 3
    found = _diagnose.diagnose(nodes)
    flap = [f for f in found if f['code'] == 'FABRIC_LINK_FLAPPING'][0]
    host_side = [f for f in found if f['code'] == 'IB_ERROR_COUNTERS' and f['host'] == 'gpu-05'][0]
    assert host_side['explained_by'] == flap['id'] and flap['evidence']['hca'] == 'mlx5_3'


def test_missing_tools_and_no_discovery_are_said(base):
    nodes = {'a': {'ib': base['ib'], 'gdr': base['gdr'],
                   'fabric': {'status': 'no_tools', 'reason': 'infiniband-diags is not installed', 'tools': {'iblinkinfo': 'not installed'}}}}
    codes = [f['code'] for f in _fabric.fabric_findings(nodes)]
    assert codes == ['FABRIC_TOOLS_MISSING']
    undiscovered = {'a': {'ib': base['ib'], 'gdr': base['gdr']}}
    assert _fabric.fabric_findings(undiscovered) == []
    assert _fabric.summary(undiscovered, [])['status'] == 'not_discovered'
    assert _fabric.summary({'a': {'ib': {'devices': []}}}, []) is None
    report = _report.build(undiscovered, [])
    assert 'Not discovered' in _html.render(report) and 'not discovered, unchecked' in _report.markdown(report)


def test_sminfo_without_umad_is_an_unknown_sm_not_an_absent_one(base):
    # What sminfo prints on a node where ib_umad is not loaded (libibumad umad_init): no SM was asked.
    umad = "ibwarn: [4711] umad_init: can't read ABI version from /sys/class/infiniband_mad/abi_version (2): maybe ib_umad is not loaded"
    fabric = {'status': 'partial', 'tools': {'iblinkinfo': 'used', 'ibnetdiscover': 'used', 'sminfo': 'failed: rc=255'},
              'sm': {'sms': [], 'errors': [{'asked': 'local port', 'error': umad}]}, 'topology': {}}
    nodes = {'a': {'ib': base['ib'], 'gdr': base['gdr'], 'fabric': fabric}}
    codes = [f['code'] for f in _fabric.fabric_findings(nodes)]
    assert codes == ['FABRIC_TOOLS_MISSING']
    # The SM itself not answering (sminfo reached the fabric) is still an absent SM.
    fabric['sm']['errors'] = [{'asked': 'local port', 'error': 'sminfo: iberror: failed: query'}]
    assert 'FABRIC_SM_ABSENT' in [f['code'] for f in _fabric.fabric_findings(nodes)]


def test_priority_tie_between_master_and_standby():
    fabric = {'status': 'ok', 'tools': {}, 'sm': {'sms': [
        {'lid': 1, 'guid': '0x1', 'priority': 5, 'state': 3}, {'lid': 7, 'guid': '0x7', 'priority': 5, 'state': 2}], 'errors': []}}
    found = _fabric.sm_findings(fabric, {}, 'a')
    assert [f['code'] for f in found] == ['FABRIC_SM_PRIORITY_TIE'] and found[0]['evidence']['priority'] == [5]


def test_rates_rules():
    # 400 Gb/s at BER 1e-12: 0.4 symbol errors per second allowed.
    assert _rates.allowed_symbol_errors_per_s(425.0) == pytest.approx(0.425)
    assert _rates.judge({'symbol_error': 3}, 10, 425.0) == []
    over = _rates.judge({'symbol_error': 50}, 10, 425.0)
    assert [(v['rule'], v['per_s']) for v in over] == [('ber', 5.0)]
    assert [v['rule'] for v in _rates.judge({'symbol_error': 1})] == ['ber']      # no time, no rate: fail closed
    assert [v['rule'] for v in _rates.judge({'link_downed': 1, 'link_error_recovery': 2}, 5, 425.0)] == ['flapping', 'recovering']
    assert _rates.judge({'link_downed': '9', 'symbol_error': True}, 5, 425.0) == []
    result = _rates.compare({'link_downed': 5, 'symbol_error': 0}, {'link_downed': 2, 'symbol_error': 0}, 5, 425.0)
    assert result == {'increase': {}, 'cleared': ['link_downed'], 'verdicts': []}


def test_bench_counter_deltas_use_the_rate_rules():
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
    before = {'devices': [{'name': 'mlx5_0', 'ports': [{'counters_read_at': 100.0, 'counters': {'link_downed': 0, 'symbol_error': 0}}]}]}
    after = {'devices': [{'name': 'mlx5_0', 'ports': [{'counters_read_at': 110.0, 'counters': {'link_downed': 1, 'symbol_error': 2}}]}]}
    assert _bench.counter_seconds(before, after, 'mlx5_0') == 10.0
    record = _bench.record_of({'side': 'server', 'server_hca': 'mlx5_0', 'client_hca': 'mlx5_0', 'round': 1, 'memory': 'host',
                               'rail': 'mlx5_0', 'server': 'a', 'client': 'b'}, {'status': 'ok'}, before, after)
    assert record['counters_delta'] == {'link_downed': 1, 'symbol_error': 2} and record['counters_seconds'] == 10.0
    report = _bench.report({'a': {'records': [record], 'plan': {'rate_gbps': {'mlx5_0': 400.0}}}}, None)
    assert [v['rule'] for v in report['counters'][0]['verdicts']] == ['flapping']


def test_html_fabric_view_escapes_hostile_names(base):
    nodes = diagnosis_accuracy.fabric_nodes(('degraded_switch_link',), base)
    for node in nodes['gpu-01']['fabric']['topology']['nodes'].values():
        if node['type'] == 'switch':
            node['desc'] = '<script>alert(1)</script>' + node['desc']
    found = _diagnose.diagnose(nodes)
    report = _report.build(nodes, found)
    html = _html.render(report)
    assert '<script>alert(1)</script>' not in html and '&lt;script&gt;alert(1)&lt;/script&gt;' in html
    assert '<section id="fabric">' in html and html.count('<line ') == 8
    assert 'class="bad"' in html and '#d55e00' in html
    markdown = _report.markdown(report)
    assert '## Fabric links and switch ports' in markdown and 'FABRIC_LINK_DEGRADED' in markdown
