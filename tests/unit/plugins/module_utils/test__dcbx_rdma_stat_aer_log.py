# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The parsers of lldptool, dcb (dcbx, the pg-pfc map and the PFC statistics, app entries in
symbolic form), mlnx_qos's DCBX mode, rdma statistic and the kernel's AER log lines, each on the
real printouts of tests/fixtures/public (their sources are on their first lines), and the DCBX
verdict (_dcbx.manager) and read (_roce.read_dcbx)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _aer_log, _dcbx, _rdma_stat, _roce

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public')


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), encoding='utf-8') as handle:
        return ''.join(line for line in handle if not line.startswith('## '))


def sections(text):
    """The printouts of a fixture that holds several, each after its '# ' / '$ ' command line."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith(('# ', '$ ', '(5) $ ')):
            current = []
            found.append(current)
        elif current is not None:
            current.append(line)
    return ['\n'.join(lines) for lines in found]


# ---------------------------------------------------------------------------- lldptool

def test_lldptool_pfc_tlv_willing_dpaa2():
    parsed = _dcbx.parse_lldptool(fixture('lldptool', 'netdev_dpaa2_pfc_tlv_willing.txt'))
    assert parsed['pfc'] == {'willing': True, 'mbc': False, 'cap': 8, 'enabled': [1, 3, 7]}
    assert parsed['ets'] is None and parsed['app'] is None
    assert _dcbx.lldp_willing(parsed, None) is True


def test_lldptool_ti_indented_headers_not_willing():
    parsed = _dcbx.parse_lldptool(fixture('lldptool', 'irdma_readme_ti_nonwilling_prio0.txt'))
    assert parsed['ets']['willing'] is False and parsed['pfc']['willing'] is False
    assert parsed['pfc']['enabled'] == [0]
    assert parsed['ets']['prio_tc'] == dict((p, 0) for p in range(8))
    assert parsed['ets']['tc_bw'] == {0: 100, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0}
    assert parsed['ets']['tc_tsa'][0] == 'ets' and parsed['ets']['tc_tsa'][7] == 'strict'
    assert _dcbx.lldp_willing(parsed, parsed) is False


def test_lldptool_ti_tabs_prio2_and_cut_last_line():
    parsed = _dcbx.parse_lldptool(fixture('lldptool', 'irdma_readme_ti_tabs_prio2.txt'))
    assert parsed['pfc']['enabled'] == [2] and parsed['ets']['prio_tc'][2] == 2 and parsed['ets']['tc_bw'][2] == 100


def test_lldptool_neighbour_app_entries():
    parsed = _dcbx.parse_lldptool(fixture('lldptool', 'taf_lldptool_unittest_ieee_tni_app.txt'))
    assert parsed['ets']['willing'] is True and parsed['pfc']['willing'] is True
    assert parsed['ets']['tc_bw'] == {0: 12, 1: 12, 2: 12, 3: 12, 4: 13, 5: 13, 6: 13, 7: 13}   # ' \t MAX_TCS' does not stop it
    assert parsed['pfc']['enabled'] == [1, 2, 5, 7]
    assert parsed['app'] == [{'priority': 2, 'sel': 2, 'protocol': 3260}, {'priority': 5, 'sel': 1, 'protocol': 0x8906}]
    assert parsed['dscp2prio'] == {}


def test_lldptool_ets_recommendation_does_not_overwrite_configuration():
    parsed = _dcbx.parse_lldptool(fixture('lldptool', 'taf_lldptool_unittest_ets_rec_pfc_none.txt'))
    assert parsed['ets']['prio_tc'] == dict((p, p) for p in range(8))     # not the recommendation's 0:0 1:0 2:1 ...
    assert parsed['ets']['willing'] is False and parsed['pfc'] == {'willing': True, 'mbc': False, 'cap': 8, 'enabled': []}
    assert _dcbx.lldp_willing(parsed, parsed) is True                      # PFC willing is enough


def test_lldptool_layout_app_dscp_entries():
    parsed = _dcbx.parse_lldptool(fixture('lldptool', 'broadcom_niccli_qos_dscp_app.txt'))
    assert parsed['pfc'] == {'enabled': [3]} and parsed['ets']['tc_bw'] == {0: 50, 1: 50, 2: 0}
    assert parsed['dscp2prio'] == {48: [7], 26: [3]}
    assert parsed['app'][2] == {'priority': 3, 'sel': 3, 'protocol': 4791}
    assert _dcbx.lldp_willing(parsed, parsed) is None                      # no Willing line: not known


def test_lldptool_config_answers():
    assert _dcbx.parse_lldptool('willing=yes\n')['config'] == {'willing': 'yes'}
    assert _dcbx.parse_lldptool('mode=auto\n')['mode'] == 'auto'


# ---------------------------------------------------------------------------- dcb, mlnx_qos

def test_mlnx_qos_dcbx_modes():
    assert _dcbx.parse_mlnx_qos_dcbx(fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt')) == 'os'
    text = fixture('mlnx_qos', 'nanodata_blog_fw_controlled_ets_bw.txt')
    assert _dcbx.parse_mlnx_qos_dcbx(text) == 'firmware'
    parsed = _roce.parse_mlnx_qos(text)   # the rest of that printout is read as before
    assert parsed['pfc'] == [3] and parsed['tc_bw'] == {0: 50, 3: 50} and parsed['prio_tc'][3] == 3
    assert _dcbx.parse_mlnx_qos_dcbx('Priority trust state: dscp\n') is None


def test_dcb_dcbx_show():
    assert _dcbx.parse_dcb_dcbx(fixture('dcb', 'man7_dcb_dcbx_show_host_ieee.txt')) == ['host', 'ieee']
    assert _dcbx.parse_dcb_dcbx('Attribute read: Operation not supported\n') is None
    assert _dcbx.parse_dcb_dcbx('lld-managed cee\n') == ['cee', 'lld-managed']


def test_dcb_pfc_first_iproute2_pg_pfc_and_statistics():
    text = fixture('dcb', 'iproute2_dcb_pfc_patch_pg_pfc_stats.txt')
    assert _roce.parse_dcb_pfc(text) == [1, 7]           # 'pg-pfc': was None (not read) before
    stats = _roce.parse_dcb_pfc_stats(text)
    assert stats['requests'][1] == 217 and stats['requests'][7] == 28
    assert stats['indications'][1] == 179 and stats['indications'][7] == 18 and stats['indications'][3] == 0


def test_dcb_pfc_statistics_alone_and_absent():
    stats = _roce.parse_dcb_pfc_stats(fixture('dcb', 'netdev_flow_control_doc_pfc_stats_only.txt'))
    assert stats == {'requests': {0: 0, 1: 0, 2: 0, 3: 1024, 4: 2048, 5: 0, 6: 0, 7: 0},
                     'indications': {0: 0, 1: 0, 2: 0, 3: 512, 4: 4096, 5: 0, 6: 0, 7: 0}}
    assert _roce.parse_dcb_pfc_stats(fixture('dcb', 'man7_dcb_pfc_show_prio67.txt')) == {'requests': None, 'indications': None}
    assert _roce.parse_dcb_pfc_stats('requests 0:%s 1:5\n' % ('9' * 30))['requests'] == {1: 5}   # past a u64: left out


def test_dcb_app_symbolic_on_a_switch_chip_with_default_prio():
    text = fixture('dcb', 'ocelot_felix_dcb_app_default_prio_symbolic.txt')
    assert _roce.parse_dcb_app(text) == {16: 2, 24: 5} and _roce.dcb_app_conflicts(text) == {}


def test_dcb_app_duplicate_dscp_then_replaced():
    first, added, replaced = sections(fixture('dcb', 'iproute2_dcb_app_patch_cs3_twice.txt'))
    assert _roce.parse_dcb_app(first) == {0: 0, 24: 3, 48: 6}
    # DSCP 24 to priorities 3 and 4: which the NIC applies is the driver's choice - not in the map, named as a conflict.
    assert _roce.parse_dcb_app(added) == {0: 0, 48: 6} and _roce.dcb_app_conflicts(added) == {24: [3, 4]}
    assert _roce.parse_dcb_app(replaced) == {0: 0, 24: 5, 48: 6} and _roce.dcb_app_conflicts(replaced) == {}


def test_dcb_app_symbolic_and_numeric_mixed():
    assert _roce.parse_dcb_app('dscp-prio CS4:4 AF41:3 24:3\n') == {32: 4, 34: 3, 24: 3}


# ---------------------------------------------------------------------------- rdma statistic

def test_rdma_statistic_wrapped_by_mail_and_p_layout():
    ports, cut = _rdma_stat.parse_rdma_statistic(fixture('rdma_stat', 'iproute2_rdma_stat_patch_wrapped.txt'))
    assert not cut and list(ports) == ['mlx5_0/1']
    counters = ports['mlx5_0/1']
    assert len(counters) == 21 and counters['rx_atomic_requests'] == 0 and counters['np_cnp_sent'] == 0
    assert 'out_of_sequence' not in counters          # this kernel had none: absent, never 0


def test_rdma_statistic_optional_counters_and_mode_lines():
    ports, _cut = _rdma_stat.parse_rdma_statistic(fixture('rdma_stat', 'linux_rdma_optional_counters_rocep8s0f0.txt'))
    assert ports['rocep8s0f0/1']['out_of_sequence'] == 0 and ports['rocep8s0f0/1']['cc_rx_cnp_pkts'] == 0
    assert len(ports['rocep8s0f0/1']) == 30 and ports['rocep8s0f1/1'] == {}   # 'supported' lines: names, no values


def test_rdma_statistic_qp_record_and_link():
    ports, _cut = _rdma_stat.parse_rdma_statistic(fixture('rdma_stat', 'rdma_qp_stat_and_link_rocep1s0f5.txt'))
    assert 'cntn' not in ports['mlx5_2/1'] and 'pid' not in ports['mlx5_2/1'] and ports['mlx5_2/1']['out_of_sequence'] == 0
    assert len(ports['rocep1s0f5/1']) == 21


def test_rdma_statistic_counts_that_are_not_zero():
    ports, _cut = _rdma_stat.parse_rdma_statistic(fixture('rdma_stat', 'mlnx_iproute2_rdma_statistic_nonzero.txt'))
    assert ports['mlx5_0/1']['out_of_buffer'] == 135 and ports['mlx5_0/1']['resp_cqe_error'] == 1009
    assert ports['mlx5_0/1']['req_cqe_flush_error'] == 11 and ports['mlx5_1/1'] == {}


def test_rdma_statistic_bounds():
    ports, _cut = _rdma_stat.parse_rdma_statistic('link mlx5_0/1 out_of_sequence %s np_cnp_sent 3' % ('9' * 25))
    assert ports == {'mlx5_0/1': {'np_cnp_sent': 3}}
    ports, cut = _rdma_stat.parse_rdma_statistic(''.join('link d%d/1 a 1 ' % n for n in range(_rdma_stat.MAX_PORTS + 5)))
    assert len(ports) == _rdma_stat.MAX_PORTS and cut


# ---------------------------------------------------------------------------- AER log lines

def test_aer_journal_rxerr_with_aer_prefix():
    devices = _aer_log.parse_aer_log(fixture('aer_log', 'gsconnect_1052_journal_rxerr.txt'))['devices']
    assert devices == {'0000:00:1c.5': {'id': '8086:9d15', 'events': {'correctable': 3}, 'errors': {'correctable': {'RxErr': 3}},
                                        'reported_by': ['0000:00:1c.5']}}


def test_aer_dmesg_data_link_timeout():
    device = _aer_log.parse_aer_log(fixture('aer_log', 'archfan_coreboot_2_dmesg_timeout.txt'))['devices']['0000:00:1c.1']
    assert device['errors'] == {'correctable': {'Timeout': 3}} and device['id'] == '8086:8c12'


def test_aer_correctable_words_several_bits_and_reporter():
    devices = _aer_log.parse_aer_log(fixture('aer_log', 'dasharo_coreboot_815_correctable_multi_bit.txt'))['devices']
    endpoint = devices['0000:06:00.0']
    # The bits before the excerpt's first record are not counted: no record says their severity.
    assert endpoint['errors'] == {'correctable': {'RxErr': 1, 'BadTLP': 1, 'BadDLLP': 1}} and endpoint['events'] == {'correctable': 1}
    assert endpoint['reported_by'] == ['0000:00:1d.3'] and devices['0000:00:1d.3']['errors'] == {'correctable': {'Timeout': 1}}


def test_aer_old_long_names_and_wrapped_record():
    devices = _aer_log.parse_aer_log(fixture('aer_log', 'endlessm_linux_131_old_receiver_error.txt'))['devices']
    assert devices['0000:00:1c.5']['errors'] == {'correctable': {'RxErr': 1}}   # 'Receiver Error' is bit 0: RxErr


def test_aer_endpoint_and_root_port():
    devices = _aer_log.parse_aer_log(fixture('aer_log', 'pop_os_751_nvme_and_root_port.txt'))['devices']
    assert devices['0000:00:1d.0']['events'] == {'correctable': 2} and devices['0000:03:00.0']['id'] == '144d:a808'
    assert devices['0000:03:00.0']['reported_by'] == ['0000:00:1d.0']


def test_aer_uncorrectable_severities_and_hca():
    text = ('pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:3b:00.0\n'
            'mlx5_core 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)\n'
            'mlx5_core 0000:3b:00.0: AER:   device [15b3:101b] error status/mask=00004000/00000000\n'
            'mlx5_core 0000:3b:00.0: AER:    [14] CmpltTO                (First)\n'
            'mlx5_core 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)\n'
            'mlx5_core 0000:3b:00.0: AER:    [18] MalfTLP\n')
    device = _aer_log.parse_aer_log(text)['devices']['0000:3b:00.0']
    assert device['errors'] == {'nonfatal': {'CmpltTO': 1}, 'fatal': {'MalfTLP': 1}} and device['id'] == '15b3:101b'
    assert device['reported_by'] == ['0000:00:01.0']


# ---------------------------------------------------------------------------- DCBX verdict and read

@pytest.mark.parametrize('dcbx, who', [
    ({'mode': 'os', 'lldp_willing': None, 'lldp_reason': 'lldptool (lldpad) not installed'}, 'host'),
    ({'mode': 'os', 'lldp_willing': False}, 'host'),
    ({'mode': 'os', 'lldp_willing': True}, 'switch'),
    ({'mode': 'firmware'}, 'switch'),
    ({'dcb_dcbx': ['host', 'ieee']}, 'host'),
    ({'dcb_dcbx': ['ieee', 'lld-managed']}, 'switch'),
    ({'dcb_dcbx': ['host', 'lld-managed']}, 'host'),     # both: the host's agent is asked (dcb-dcbx(8) lets the driver choose)
    ({}, None),
    (None, None),
    ({'mode': 'weird', 'dcb_dcbx': 'host'}, None),       # a damaged snapshot: nothing read
])
def test_manager(dcbx, who):
    assert _dcbx.manager(dcbx)[0] == who


def test_read_dcbx_asks_lldptool_unless_the_firmware_runs_dcbx():
    asked = []

    def run(argv):
        asked.append(argv[0] + ' ' + argv[1])
        if argv[0] == 'lldptool':
            return 0, fixture('lldptool', 'netdev_dpaa2_pfc_tlv_willing.txt')
        return 0, 'host ieee\n'
    dcbx = _roce.read_dcbx(run, 'eth0', None, None, 'dcb')
    assert dcbx['dcb_dcbx'] == ['host', 'ieee'] and dcbx['lldp_willing'] is True and dcbx['manager'] == 'switch'
    assert asked == ['dcb dcbx', 'lldptool -t', 'lldptool -t']
    del asked[:]
    assert _roce.read_dcbx(run, 'eth0', 'firmware', None, 'mlnx_qos')['manager'] == 'switch' and asked == []


def test_read_dcbx_without_lldpad_and_without_tools():
    dcbx = _roce.read_dcbx(lambda argv: (1, '') if argv[0] == 'lldptool' else None, 'eth0', 'os', None, 'mlnx_qos')
    assert dcbx['manager'] == 'host' and 'no LLDP agent' in dcbx['not_read']['lldptool']
    dcbx = _roce.read_dcbx(lambda argv: None, 'eth0', None, None, 'dcb')
    assert dcbx['manager'] is None and set(dcbx['not_read']) == {'dcb_dcbx', 'lldptool'}
    dcbx = _roce.read_dcbx(None, 'eth0', None, 'the DCB tools were not run (qos_tools=never)', None)
    assert dcbx['manager'] is None and 'qos_tools=never' in dcbx['why']


def test_rdma_statistic_superscript_digit_is_no_count():
    # '²'.isdigit() is True but int('²') raises: found by tests/unit/plugins/module_utils/test_fuzz_dcbx_rdma_stat_aer_log.py.
    assert _rdma_stat.parse_rdma_statistic('link mlx5_0/1 out_of_sequence \u00b2 np_cnp_sent 4')[0] == {'mlx5_0/1': {'np_cnp_sent': 4}}
