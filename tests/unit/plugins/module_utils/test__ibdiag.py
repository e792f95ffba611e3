# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The infiniband-diags parsers on real outputs (tests/fixtures/public/{iblinkinfo,ibnetdiscover,
sminfo,perfquery}/, each with its source) and on the simulator's stand-ins."""

from __future__ import annotations

import glob
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ibdiag as D
from tests.sim import fabric, tools_ibdiags

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public')


def body(kind, name):
    with open(os.path.join(FIXTURES, kind, name)) as handle:
        lines = handle.read().splitlines(True)
    assert lines[0].startswith('## source: ') and 'https://github.com/' in lines[0]
    return ''.join(line for line in lines if not line.startswith('## '))


def test_every_fixture_names_its_source():
    files = [p for kind in ('iblinkinfo', 'ibnetdiscover', 'sminfo', 'saquery', 'perfquery')
             for p in glob.glob(os.path.join(FIXTURES, kind, '*.txt'))]
    assert len(files) >= 8
    for path in files:
        with open(path) as handle:
            head = handle.read().splitlines()[:2]
        assert head[0].startswith('## source: https://github.com/') or head[0].startswith('## source: ')
        assert head[1].startswith('## note: ')


def test_iblinkinfo_edr_switch_and_cas():
    parsed = D.parse_iblinkinfo(body('iblinkinfo', 'linpack_edr_sb7700.txt'))
    assert parsed['unparsed'] == []
    topo = D.topology(parsed)
    switch = topo['nodes']['0x506b4b0300820910']
    assert switch['type'] == 'switch' and switch['desc'] == 'MF0;SB7700:MSB7700/U1' and switch['lids'] == [2]
    active = [l for l in topo['links'] if l['state'] == 'Active']
    down = [l for l in topo['links'] if l['state'] == 'Down']
    assert len(active) == 3 and len(down) == 16
    assert all(l['b'] is None and l['phys_state'] == 'Polling' and l['gbps'] is None for l in down)
    n02 = [l for l in active if '0xec0d9a03003d62be' in (l['a']['node'], l['b']['node'])][0]
    assert n02['width'] == '4X' and n02['lane_gbps'] == 25.78125 and n02['speed'] == 'EDR' and n02['gbps'] == 103.125
    assert {n02['a']['port'], n02['b']['port']} == {1, 17}


def test_iblinkinfo_grep_excerpt_without_headers():
    topo = D.topology(D.parse_iblinkinfo(body('iblinkinfo', 'linpack_grep_up_no_headers.txt')))
    # Six lines, three links seen from both ends.
    assert len(topo['links']) == 3
    assert sorted(l['a']['lid'] for l in topo['links']) == [2, 3, 4] or sorted((l['a']['lid'], l['b']['lid']) for l in topo['links'])
    assert topo['nodes']['lid-2']['type'] is None and topo['nodes']['0xec0d9a03003d677a']['type'] == 'ca'


def test_iblinkinfo_could_be_and_unreadable_lines():
    text = ('Switch: 0x0000000000200002 hxa-su1-leaf-r1:\n'
            '           4    1[  ] ==( 4X           2.5 Gbps Active/  LinkUp)==>       5    1[  ] "hxa-gpu01 mlx5_0" '
            '(Could be 12X Could be 10.0 Gbps)\n'
            'garbage that is no port line\n')
    parsed = D.parse_iblinkinfo(text)
    assert parsed['links'][0]['could_be'] == {'width': '12X', 'lane_gbps': 10.0}
    assert parsed['unparsed'] == [{'line': 3, 'text': 'garbage that is no port line', 'reason': D._LINKINFO_UNREAD}]


def test_ibnetdiscover_man_page_keeps_the_lower_end_of_a_1x_link():
    parsed = D.parse_ibnetdiscover(body('ibnetdiscover', 'rdma_core_man_voltaire_1x.txt'))
    assert parsed['unparsed'] == []
    topo = D.topology(None, parsed)
    assert len(topo['nodes']) == 6 and len(topo['links']) == 7
    switches = sorted(n['desc'] for n in topo['nodes'].values() if n['type'] == 'switch')
    assert switches == ['ISR9024 Voltaire', 'SW-6IB4 Voltaire']
    one_x = sorted((l['a']['port'], l['b']['port']) for l in topo['links'] if l['width'] == '1X')
    assert len(one_x) == 2 and all(l['ends_disagree'] for l in topo['links'] if l['width'] == '1X')
    assert all(l['speed'] == 'SDR' and l['lane_gbps'] == 2.5 for l in topo['links'])


def test_sminfo_one_line_and_wrapped():
    parsed = D.parse_sminfo(body('sminfo', 'ompi_users_2009_master.txt'))
    assert [s['activity'] for s in parsed['sms']] == [6881, 6882]
    assert parsed['sms'][0] == {'lid': 2, 'guid': '0x0002c90200259201', 'activity': 6881, 'priority': 0, 'state': 3,
                                'state_name': 'SMINFO_MASTER'}
    wrapped = D.parse_sminfo(body('sminfo', 'ompi_users_2009_wrapped.txt'))
    assert len(wrapped['sms']) == 1 and wrapped['sms'][0]['state'] == 3 and wrapped['sms'][0]['priority'] == 0


@pytest.mark.parametrize('name,records,unread', [
    ('ompi_users_2009_master.txt', [(2, 6881, 0, 3), (2, 6882, 0, 3)], []),
    # The mail's wrap after 'activity count 6881': joined; the cluster shell's separator is said, not skipped.
    ('ompi_users_2009_wrapped.txt', [(2, 6881, 0, 3)], ['--------- n01---------']),
    # Rewrapped after 'priority 0': the first line alone would be a record without a state.
    ('ompi_users_2009_wrapped_after_priority.txt', [(2, 6881, 0, 3), (2, 6882, 0, 3)], []),
])
def test_sminfo_records_wrapped_anywhere(name, records, unread):
    parsed = D.parse_sminfo(body('sminfo', name))
    assert [(s['lid'], s['activity'], s['priority'], s['state']) for s in parsed['sms']] == records
    assert all(s['guid'] == '0x0002c90200259201' and s['state_name'] == 'SMINFO_MASTER' for s in parsed['sms'])
    assert [item['text'] for item in parsed['unparsed']] == unread and parsed['unparsed_count'] == len(unread)


@pytest.mark.parametrize('cut', [' priority 0', ' state', ' state 3', ' activity count'])
def test_sminfo_master_line_wrapped_at_any_word(cut):
    line = 'sminfo: sm lid 2 sm guid 0x2c90200259201, activity count 6881 priority 0 state 3 SMINFO_MASTER'
    head, tail = line.split(cut, 1)
    parsed = D.parse_sminfo(head + cut + '\n' + tail.strip() + '\n' if cut.endswith('0') or cut.endswith('3')
                            else head + '\n' + cut.strip() + tail + '\n')
    assert [(s['state'], s['priority'], s['activity']) for s in parsed['sms']] == [(3, 0, 6881)] and parsed['unparsed'] == []


def test_sminfo_record_whose_state_never_comes_is_said():
    parsed = D.parse_sminfo('sminfo: sm lid 2 sm guid 0x2c90200259201, activity count 6881 priority 0\n')
    assert parsed['sms'][0]['state'] is None and parsed['unparsed_count'] == 1


def test_saquery_smir_master_and_standby():
    parsed = D.parse_saquery_sminfo(body('saquery', 'rdma_core_format_smir_master_standby_tie.txt'))
    assert parsed['unparsed'] == [] and parsed['errors'] == []
    assert [(s['lid'], s['guid'], s['priority'], s['state'], s['state_name'], s['activity']) for s in parsed['sms']] == [
        (2, '0x0002c90200259201', 0, 3, 'SMINFO_MASTER', 6881), (7, '0x0002c9020025a1c5', 0, 2, 'SMINFO_STANDBY', 0)]


def test_saquery_smir_cut_record_and_failure():
    text = body('saquery', 'rdma_core_format_smir_master_standby_tie.txt')
    cut = D.parse_saquery_sminfo('\n'.join(text.splitlines()[:-2]))      # the standby's Priority and SMState cut
    assert len(cut['sms']) == 1 and cut['unparsed_count'] == 1 and 'incomplete' in cut['unparsed'][0]['text']
    failed = D.parse_saquery_sminfo('ibwarn: [4711] sa_query: umad_recv failed: attr 0x18: Connection timed out\n'
                                    'Query SA failed: Connection timed out\n')
    assert failed['sms'] == [] and len(failed['errors']) == 2 and failed['unparsed'] == []


def test_ibnetdiscover_ports_report_edr():
    parsed = D.parse_ibnetdiscover(body('ibnetdiscover', 'infiniband_exporter_ports_edr.txt'))
    assert parsed['unparsed'] == []
    topo = D.topology(None, parsed)
    up = [l for l in topo['links'] if l['b']]
    # Seven connected lines: each host link from both ends (3), the switch link from one.
    assert len(up) == 4 and all(l['width'] == '4X' and l['speed'] == 'EDR' and l['gbps'] == 103.125 for l in up)
    o0001 = [l for l in up if '0x7cfe9003003b4bde' in (l['a']['node'], l['b']['node'])][0]
    assert sorted((e['lid'], e['port']) for e in (o0001['a'], o0001['b'])) == [(134, 1), (1719, 10)]
    assert topo['nodes']['0x7cfe9003003b4bde']['type'] == 'ca' and topo['nodes']['0x7cfe9003003b4bde']['desc'] == 'o0001 HCA-1'
    assert topo['nodes']['0x7cfe9003009ce5b0'] == dict(topo['nodes']['0x7cfe9003009ce5b0'], type='switch', desc='ib-i1l1s01', lids=[1719])
    lone = sorted((l['a']['lid'], l['a']['port']) for l in topo['links'] if l['b'] is None)
    assert lone == [(1781, 80), (2052, 37)]
    assert all(l['state'] is None and l['gbps'] is None for l in topo['links'] if l['b'] is None)


def test_ibnetdiscover_ports_report_with_odd_spacing():
    parsed = D.parse_ibnetdiscover(body('ibnetdiscover', 'infiniband_exporter_ports_hdr_spaces.txt'))
    assert parsed['unparsed'] == []
    assert parsed['nodes']['0x946dae0300618c83']['desc'] == '5FB0406-spine-IB02'
    assert [l['speed'] for l in parsed['links'] if l['b']] == ['HDR', 'HDR', 'HDR']


def test_lines_no_pattern_reads_are_counted():
    parsed = D.parse_ibnetdiscover(body('ibnetdiscover', 'infiniband_exporter_ports_edr.txt') + 'CA gibberish\n')
    assert parsed['unparsed'] == [{'line': 10, 'text': 'CA gibberish'}]
    unread = {}
    D.parse_perfquery(body('perfquery', 'infiniband_diags_16_rhel75_x.txt') + 'PortXmitData 12\n', unread)
    assert unread['count'] == 1 and [item['text'] for item in unread['lines']] == ['PortXmitData 12']
    # A shell prompt kept with the output is a comment; a wrapped header's continuation is read (netdata fixture).
    for name in ('infiniband_diags_16_rhel75_x.txt', 'netdata_2620_extended_wrapped_header.txt', 'ibsim_1_no_header.txt'):
        unread = {}
        assert D.parse_perfquery(body('perfquery', name), unread) and unread == {'count': 0, 'lines': []}


def test_sminfo_failure_is_an_error_not_a_state():
    parsed = D.parse_sminfo('ibwarn: [4711] _do_madrpc: recv failed: Connection timed out\nsminfo: iberror: failed: query\n')
    assert parsed['sms'] == [] and len(parsed['errors']) == 2


def test_perfquery_variants():
    netdata = D.parse_perfquery(body('perfquery', 'netdata_2620_extended_wrapped_header.txt'))
    assert len(netdata) == 1 and netdata[0]['lid'] == 21 and netdata[0]['port'] == 1
    assert netdata[0]['counters']['port_rcv_data'] == 2341975277576 and netdata[0]['counters']['link_downed'] == 0
    assert 'VL15_dropped' not in netdata[0]['counters']      # cut by the excerpt: not invented
    rhel = D.parse_perfquery(body('perfquery', 'infiniband_diags_16_rhel75_x.txt'))
    assert rhel[0]['lid'] == 10 and rhel[0]['counters']['port_xmit_wait'] == 0 and len(rhel[0]['counters']) == 15
    bare = D.parse_perfquery(body('perfquery', 'ibsim_1_no_header.txt'))
    assert bare[0]['lid'] is None and bare[0]['port'] == 1 and bare[0]['counters']['symbol_error'] == 0


def test_guid_forms():
    assert D.guid('0x2c90200259201') == D.guid('2c90200259201') == '0x0002c90200259201'
    assert D.guid('a088:c203:005a:ab6c') == '0xa088c203005aab6c'
    assert D.guid('zz') is None and D.guid('0x' + '1' * 17) is None and D.guid(None) is None


def test_stand_ins_print_what_the_parsers_read(tmp_path):
    model = fabric.model(faults=('degraded_switch_link', 'missing_uplink'))
    path = fabric.write(model, str(tmp_path / 'fabric.json'))
    fab = fabric.load(path)
    linkinfo = D.parse_iblinkinfo(tools_ibdiags.iblinkinfo(fab, [])[1])
    netdiscover = D.parse_ibnetdiscover(tools_ibdiags.ibnetdiscover(fab, [])[1])
    assert linkinfo['unparsed'] == [] and netdiscover['unparsed'] == []
    topo = D.topology(linkinfo, netdiscover)
    assert len([n for n in topo['nodes'].values() if n['type'] == 'switch']) == 6
    assert len([n for n in topo['nodes'].values() if n['type'] == 'ca']) == 128
    # 128 host links + 31 up-links, and the down up-link as two ports without a peer (leaf and spine side).
    assert len(topo['links']) == 161 and len([l for l in topo['links'] if l['state'] == 'Down' and l['b'] is None]) == 2
    degraded = [l for l in topo['links'] if l['width'] == '1X']
    assert len(degraded) == 1 and degraded[0]['could_be']['width'] == '4X'
    sm = D.parse_sminfo(tools_ibdiags.sminfo(fab, ['1'])[1])
    assert sm['sms'][0]['priority'] == 14 and sm['sms'][0]['state_name'] == 'SMINFO_MASTER' and sm['unparsed'] == []
    ports = D.parse_ibnetdiscover(tools_ibdiags.ibnetdiscover(fab, ['-p'])[1])
    assert ports['unparsed'] == []
    # The ports report gives the same connected links as the topology file (and the down up-link as two lone ports).
    by_ports = D.topology(None, ports)
    assert len([l for l in by_ports['links'] if l['b']]) == 159 and len([l for l in by_ports['links'] if not l['b']]) == 2
    counters = D.parse_perfquery(tools_ibdiags.perfquery(fab, ['-x', '-l', '3'], path)[1])
    assert len(counters) == 40 and all(c['lid'] == 3 for c in counters)


def _ports_line(match):
    """A parsed ``ibnetdiscover -p`` line printed again with ibnetdiscover.c dump_ports_report()'s formats."""
    g = match.groupdict()
    line = '%2s %5d %2d 0x%016x %s %s' % (g['type'], int(g['lid']), int(g['port']), int(g['guid'], 16), g['width'], g['speed'])
    if g['pguid']:
        return line + " - %2s %5d %2d 0x%016x ( '%s' - '%s' )" % (
            g['ptype'], int(g['plid']), int(g['pport']), int(g['pguid'], 16), g['desc'], g['pdesc'])
    return line + "%36s'%s'" % ('', g['odesc'])


def test_stand_ins_print_the_real_formats(tmp_path):
    """The real lines are what the printf formats print, and so are the stand-ins' (byte for byte)."""
    fab = fabric.load(fabric.write(fabric.model(faults=('missing_uplink', 'sm_standby_tie')), str(tmp_path / 'fabric.json')))
    real = body('ibnetdiscover', 'infiniband_exporter_ports_edr.txt').splitlines()
    sim = tools_ibdiags.ibnetdiscover(fab, ['-p'])[1].splitlines()
    assert any("'" + ' ' * 36 not in line and line.endswith("' )") for line in sim)
    assert len([line for line in sim if line.endswith("'") and not line.endswith(' )')]) == 2      # the down up-link
    for line in real + sim:
        assert _ports_line(D._ND_PORTS_RE.match(line)) == line
    real = body('saquery', 'rdma_core_format_smir_master_standby_tie.txt').splitlines()
    out = tools_ibdiags.saquery(fab, ['SMIR'])[1].splitlines()
    assert [line.split('.')[0] for line in out] == [line.split('.')[0] for line in real]
    assert [len(line) - len(line.split('.')[-1]) for line in out] == [len(line) - len(line.split('.')[-1]) for line in real]
    parsed = D.parse_saquery_sminfo('\n'.join(out))
    assert [(s['lid'], s['priority'], s['state']) for s in parsed['sms']] == [(1, 14, 3), (2, 14, 2)]
    standby = D.parse_sminfo(tools_ibdiags.sminfo(fab, ['2'])[1])['sms']
    assert [(s['lid'], s['state_name'], s['priority']) for s in standby] == [(2, 'SMINFO_STANDBY', 14)]
