# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Each pair test's window (plugin_utils/bench/_window.py: deltas between the reads around its step, resets
never read as a fall) and the rules over them (plugin_utils/diagnosis/rules/_window.py): each root on its
device, healthy congestion no finding, ROCE_CONGESTION from the window where there is one (its since-boot
form info), the records' windows through a records file (what the judging of saved records reads) judged alike."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench, _window
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _roce_rules
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules import _bench as bench_rules, _window as rules

HCA, BRIDGE, ROOT, GPU = '0000:1b:00.0', '0000:18:00.0', '0000:17:00.0', '0000:19:00.0'
OLD = {'paths': {'mlx5_0': [ROOT, BRIDGE, HCA]}, 'gpu_paths': {GPU: [ROOT, GPU]},
       'aer': {HCA: {'BadTLP': 5, 'TOTAL_ERR_COR': 5}, BRIDGE: {'Timeout': 1, 'TOTAL_ERR_COR': 1}, GPU: {'TOTAL_ERR_COR': 0},
               ROOT: {'TOTAL_ERR_COR': 9}},
       'cc': {'mlx5_0': {'np_cnp_sent': 10, 'rp_cnp_handled': 4, 'out_of_sequence': 0}}, 'pause': {'mlx5_0': {'rx_prio3_pause': 7}},
       'roce': ['mlx5_0'], 'unread': {}}


def _new(**changes):
    new = copy.deepcopy(OLD)
    for part, values in changes.items():
        for name, value in values.items():
            new[part].setdefault(name, {}).update(value)
    return new


def test_window_of_keeps_the_rises_of_the_test_path_only():
    new = _new(aer={HCA: {'BadTLP': 2605, 'TOTAL_ERR_COR': 2605}, BRIDGE: {'Timeout': 451, 'TOTAL_ERR_COR': 451},
                    GPU: {'TOTAL_ERR_COR': 3}, '0000:99:00.0': {'TOTAL_ERR_COR': 50}},
               cc={'mlx5_0': {'np_cnp_sent': 110}}, pause={'mlx5_0': {'rx_prio3_pause': 9}})
    window = _window.window_of(OLD, new, 'mlx5_0', None, 2.0, {'links': {HCA: [[32.0, 16], [16.0, 16]], GPU: [[2.5, 16], [32.0, 16]]}})
    assert [(a['bdf'], a['role'], a['rise']) for a in window['aer']] == [
        (BRIDGE, 'hca_link', {'Timeout': 450, 'TOTAL_ERR_COR': 450}), (HCA, 'hca', {'BadTLP': 2600, 'TOTAL_ERR_COR': 2600})]
    assert window['cc'] == {'np_cnp_sent': 100} and window['pause'] == {'rx_prio3_pause': 2} and window['roce'] is True
    # Host memory: the GPU's path is not the test's, and an idle GPU's low link speed is not sampled.
    assert [link['bdf'] for link in window['links']] == [HCA]
    gpu_test = _window.window_of(OLD, new, 'mlx5_0', GPU, 2.0, {'links': {GPU: [[2.5, 16], [32.0, 16]]}})
    assert [(a['bdf'], a['role']) for a in gpu_test['aer']] == [(BRIDGE, 'hca_link'), (GPU, 'gpu'), (HCA, 'hca')]
    assert [link['bdf'] for link in gpu_test['links']] == [GPU]


def test_a_counter_that_went_down_is_a_reset_never_a_fall():
    new = _new(aer={HCA: {'BadTLP': 0, 'TOTAL_ERR_COR': 0}}, cc={'mlx5_0': {'np_cnp_sent': 3}})
    window = _window.window_of(OLD, new, 'mlx5_0', None, 2.0)
    assert 'aer' not in window and 'cc' not in window
    assert window['reset'] == ['aer %s BadTLP' % HCA, 'aer %s TOTAL_ERR_COR' % HCA, 'cc np_cnp_sent']
    assert _window.window_of(None, OLD, 'mlx5_0', None, 2.0) is None
    assert _window.window_of(OLD, OLD, 'mlx5_0', None, 2.0) == {'seconds': 2.0, 'roce': True}
    assert not _window.notable(_window.window_of(OLD, OLD, 'mlx5_0', None, 2.0)) and _window.notable(window)


def test_sequence_records_carry_each_tests_window():
    tests = [{'side': 'client', 'server': 'a', 'client': 'b', 'server_hca': 'mlx5_0', 'client_hca': 'mlx5_0', 'rail': 0,
              'memory': 'host', 'status': 'ok', 'summary': {'bw_avg_gbps': 300.0}}]
    start = {'devices': [], 'window': OLD}
    moved = {'devices': [], 'window': _new(aer={HCA: {'BadTLP': 2605, 'TOTAL_ERR_COR': 2605}})}
    result = {'counters_start': start,
              'steps': [{'step': 1, 'tests': tests, 'counters': moved}, {'step': 2, 'tests': tests, 'counters_same_at': 5.0}]}
    records = _bench.sequence_records('b', [{'tests': tests}] * 2, result)
    assert records[0]['window']['aer'][0]['rise'] == {'BadTLP': 2600, 'TOTAL_ERR_COR': 2600}
    assert 'aer' not in records[1]['window']         # nothing changed in step 2: counters_same_at, the same window
    report = _bench.report({'b': {'records': records, 'plan': {}}}, {})
    assert report['windowed'] == ['b'] and len(report['windows']) == 1 and report['windows'][0]['host'] == 'b'


def _entry(host, side, window, hca='mlx5_0', memory='host', server='node', client='peer1', gpu=None):
    return {'host': host, 'side': side, 'hca': hca, 'peer_hca': hca, 'round': 0, 'memory': memory, 'server': server,
            'client': client, 'rail': 0, 'gpu': gpu, 'window': dict({'seconds': 2.0, 'roce': False}, **window)}


def _fleet(windows, judged=None):
    return Fleet({}, judged or {}, {}, bench={'windows': windows, 'windowed': sorted(set(w['host'] for w in windows)) or ['node']})


def test_pcie_errors_above_the_rate_name_the_device_and_its_bridge():
    rise = [{'bdf': HCA, 'role': 'hca', 'rise': {'BadTLP': 2600, 'TOTAL_ERR_COR': 2600}},
            {'bdf': BRIDGE, 'role': 'hca_link', 'rise': {'Timeout': 450, 'TOTAL_ERR_COR': 450}}]
    found = rules.pcie_error_findings(_fleet([_entry('node', 'server', {'aer': rise})]))
    assert [f['code'] for f in found] == [F.PCIE_ERRORS_UNDER_LOAD] and found[0]['at'] == [['hca', 'node', 'mlx5_0']]
    assert found[0]['evidence']['bridges'] == [BRIDGE] and found[0]['evidence']['per_s'] == 1300.0
    assert 'LnkSta against LnkCap will not show it' in found[0]['remedy'] and HCA in found[0]['remedy']
    # One correctable error in 2 s is within what the PCIe bit error ratio allows: no finding.
    few = [{'bdf': HCA, 'role': 'hca', 'rise': {'RxErr': 1, 'TOTAL_ERR_COR': 1}}]
    assert rules.pcie_error_findings(_fleet([_entry('node', 'server', {'aer': few})])) == []
    # Any uncorrectable error is one; a bridge higher up sits on the HCA's way to host memory only.
    fatal = [{'bdf': ROOT, 'role': 'bridge', 'rise': {'TOTAL_ERR_NONFATAL': 1}}]
    found = rules.pcie_error_findings(_fleet([_entry('node', 'server', {'aer': fatal})]))
    assert found[0]['at'] == [['hca_host', 'node', 'mlx5_0']] and found[0]['evidence']['uncorrectable'] == 1


def test_retraining_is_not_degraded():
    links = [{'bdf': HCA, 'role': 'hca', 'seen': [[32.0, 16], [16.0, 16], [32.0, 16]]}]
    found = rules.retraining_findings(_fleet([_entry('node', 'client', {'links': links})]))
    assert [f['code'] for f in found] == [F.PCIE_LINK_RETRAINING] and found[0]['evidence']['changes'] == 2
    gpu = [{'bdf': GPU, 'role': 'gpu', 'seen': [[16.0, 16], [32.0, 16]]}]
    found = rules.retraining_findings(_fleet([_entry('node', 'client', {'links': gpu}, memory='gpu', gpu='GPU0')]))
    assert found[0]['at'] == [['gpu', 'node', 'GPU0'], ['gpu_nic', 'node', 'GPU0', 'mlx5_0']]
    steady = [{'bdf': HCA, 'role': 'hca', 'seen': [[32.0, 16], [None, None], [32.0, 16]]}]
    assert rules.retraining_findings(_fleet([_entry('node', 'client', {'links': steady})])) == []


def test_pause_storm_names_direction_and_priority():
    rx = {'rx_prio3_pause': 15000, 'rx_prio3_pause_duration_us': 600000}
    found = rules.pause_findings(_fleet([_entry('node', 'server', {'pause': rx, 'roce': True})]))
    assert found[0]['code'] == F.ROCE_PFC_PAUSE_STORM and found[0]['evidence']['direction'] == 'rx'
    assert found[0]['evidence']['priority'] == 3 and 'the switch paused this host' in found[0]['cause']
    tx = {'tx_prio4_pause_duration_us': 500000}
    assert 'this host paused the switch' in rules.pause_findings(_fleet([_entry('node', 'server', {'pause': tx})]))[0]['cause']
    storm = {'tx_pause_storm_error_events': 1}
    assert rules.pause_findings(_fleet([_entry('node', 'server', {'pause': storm})]))[0]['evidence']['storm_events']
    # Healthy congestion: 2 % of the test paused, no storm.
    assert rules.pause_findings(_fleet([_entry('node', 'server', {'pause': {'tx_prio3_pause_duration_us': 40000}})])) == []


def _ib(hw):
    return {'ib': {'devices': [{'name': 'mlx5_0', 'ports': [{'netdev': 'eth0', 'hw_counters': hw}]}]}}


def test_cnps_not_handled_by_the_sender():
    cnps = {'np_cnp_sent': 4000, 'np_ecn_marked_roce_packets': 4000}
    judged = {'node': _ib({'rp_cnp_handled': 0}), 'peer1': _ib({'rp_cnp_handled': 0})}
    windows = [_entry('node', 'server', {'cc': cnps}), _entry('peer1', 'client', {})]
    found = rules.cc_findings(_fleet(windows, judged))
    # The client (the sender of ib_write_bw) handled none: the root sits on its HCA.
    assert [(f['code'], f['host']) for f in found] == [(F.ROCE_CC_NOT_WORKING, 'peer1')] and found[0]['at'] == [['hca', 'peer1', 'mlx5_0']]
    # Healthy congestion: the sender handled them.
    windows[1] = _entry('peer1', 'client', {'cc': {'rp_cnp_handled': 4000}})
    assert rules.cc_findings(_fleet(windows, judged)) == []
    # A sender without the counter (no mlx5) is not judged.
    windows[1] = _entry('peer1', 'client', {})
    assert rules.cc_findings(_fleet(windows, {'node': _ib({}), 'peer1': _ib({})})) == []


def test_loss_on_a_lossless_class_or_congestion():
    loss = {'out_of_sequence': 3100, 'packet_seq_err': 120}
    judged = {'node': dict(_ib({}), roce={'ports': [{'hca': 'mlx5_0', 'source': 'mlnx_qos', 'pfc': [3], 'trust': 'dscp'}]})}
    fleet = _fleet([_entry('node', 'server', {'cc': loss, 'roce': True})], judged)
    lossless = _roce_rules.port_checks(judged['node']['roce']['ports'][0])
    codes = [f['code'] for f in rules.loss_findings(fleet)]
    expected = F.ROCE_CONGESTION if set(lossless) & {F.ROCE_PFC_OFF, F.ROCE_TC_NOT_LOSSLESS, F.ROCE_TRUST_PCP} else F.ROCE_LOSSLESS_LOSS
    assert codes == [expected]
    unknown = _fleet([_entry('node', 'server', {'cc': loss, 'roce': True})], {'node': _ib({})})
    assert [f['code'] for f in rules.loss_findings(unknown)] == [F.ROCE_CONGESTION]
    assert rules.loss_findings(_fleet([_entry('node', 'server', {'cc': loss, 'roce': False})])) == []


def test_roce_loss_counters_leave_ib_errors_under_load_to_the_window():
    bench = {'counters': [{'host': 'node', 'hca': 'mlx5_0', 'pair': 'node->peer1', 'rail': 0, 'memory': 'host', 'round': 0,
                           'increase': {'out_of_sequence': 5}, 'verdicts': []}],
             'windows': [_entry('node', 'server', {'cc': {'out_of_sequence': 5}, 'roce': True})]}
    assert bench_rules._counters_under_load(bench) == []  # pylint: disable=protected-access
    bench['windows'][0]['window']['roce'] = False
    assert [f['code'] for f in bench_rules._counters_under_load(bench)] == [F.IB_ERRORS_UNDER_LOAD]  # pylint: disable=protected-access


def test_since_boot_congestion_is_info_without_a_window():
    port = {'hca': 'mlx5_0', 'netdev': 'eth0', 'source': 'mlnx_qos', 'state': 'ACTIVE', 'link_layer': 'Ethernet', 'pfc': [3],
            'counters': {'out_of_sequence': 48211}}
    roce = {'ports': [port]}
    found = [f for f in _roce_rules.roce_findings('n', roce) if f['code'] == F.ROCE_CONGESTION]
    windowed = [f for f in _roce_rules.roce_findings('n', roce, windowed=True) if f['code'] == F.ROCE_CONGESTION]
    assert [f['severity'] for f in found] == ['info'] and windowed == []


@pytest.fixture(scope='module')
def replays():
    from tests.bench import _accuracy_window
    return _accuracy_window


def test_accuracy_case_and_its_records_read_back_from_files(replays, tmp_path_factory):
    """The simulator's run with PCIe replays on one HCA: the root on that HCA explains every slow pair through it, and
    the records written to files (as perftest_collect does, what fabric_bench_judge and a later judging read) judge alike."""
    kept = {}
    bench, found, target = replays.case('pcie_replays', kept)
    result = replays.judge('pcie_replays', found, target)
    assert result['right'] and result['symptoms'] == 8 and not result['misattributed']
    root = [f for f in found if f['code'] == F.PCIE_ERRORS_UNDER_LOAD]
    assert len(root) == 1 and root[0]['evidence']['bridges'] and not [f for f in found if f['code'] == 'BENCH_DEVICE_UNEXPLAINED']
    # Saved records: written and read back by the judging's own reader.
    directory = str(tmp_path_factory.mktemp('records'))
    nodes = {}
    for host in ('node', 'peer1', 'peer2'):
        nodes[host] = {'records_file': _bench.write_records(directory, host, kept['records'][host], 'run1'), 'run_id': 'run1',
                       'plan': kept['plans'][host]}
    again = _bench.report(nodes, {})
    assert again['windows'] == bench['windows'] and again['windowed'] == bench['windowed']
    refound = _diagnose.diagnose(kept['facts'], again)
    assert sorted((f['code'], f['host'], f['explained_by']) for f in refound) == sorted((f['code'], f['host'], f['explained_by']) for f in found)


def test_kinds_left_out_at_zero_and_static_parts_sent_once():
    """A node leaves AER kinds at 0 out of its reads and sends the PCI paths with its first read only."""
    old = dict(OLD, aer={HCA: {'TOTAL_ERR_COR': 0}})
    later = {'aer': {HCA: {'BadTLP': 5, 'TOTAL_ERR_COR': 5}}, 'cc': OLD['cc'], 'pause': OLD['pause'], 'unread': {}}
    window = _window.window_of(old, _window.carried(old, later), 'mlx5_0', None, 2.0)
    assert window['aer'] == [{'bdf': HCA, 'role': 'hca', 'rise': {'BadTLP': 5, 'TOTAL_ERR_COR': 5}}] and window['roce'] is True
    # A function absent from the earlier read (not read then) gives no rise: nothing is known of it.
    assert 'aer' not in _window.window_of(dict(OLD, aer={}), _window.carried(OLD, later), 'mlx5_0', None, 2.0)


def test_an_unexplained_hca_whose_window_was_read_is_not_sent_to_lnksta():
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _linker
    test = ({'rail': 0, 'memory': 'host', 'server': 'node', 'client': 'peer1'}, {'code': 'BENCH_PAIR_LOW', 'subject': 's'})
    plain = _linker._device_finding(('hca', 'node', 'mlx5_2'), [test], {'peer1', 'peer2'})  # pylint: disable=protected-access
    windowed = _linker._device_finding(('hca', 'node', 'mlx5_2'), [test], {'peer1', 'peer2'}, {'node'})  # pylint: disable=protected-access
    assert 'LnkSta against LnkCap' in plain['remedy'] and 'aer_dev_correctable' in plain['remedy']
    assert 'LnkSta' not in windowed['remedy'] and 'sampled under load' in windowed['remedy']
