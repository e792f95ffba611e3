# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""module_utils/_gpu_state.py over every real output of tests/fixtures/real/h200x2/state/ and every
public one of tests/fixtures/public/gpu_state/, malformed and hostile input, and read_gpu_state
with a runner that answers as the tool would (missing, refusing a field, without NVLink)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gpu_state as G
from tests.unit.conftest import fixture_path, fixture_text

REAL = ('real', 'h200x2', 'state')
PUBLIC = ('public', 'gpu_state')
FIELDS = [name for name, _key in G.QUERY_FIELDS]


@pytest.mark.parametrize('name, fields, expected', [
    # (bdf, clock_reasons, power_w, memory_used_mib, sm_clock_mhz, remapped_rows_pending, retired_pages_pending) per GPU
    ('nvsmi_query_gpu.txt', None, [('0000:00:06.0', ['gpu_idle'], 80.12, 0, 345, False, None),
                                   ('0000:00:07.0', ['gpu_idle'], 77.86, 0, 345, False, None)]),
    ('nvsmi_query_gpu_busy.txt', None, [('0000:00:06.0', ['gpu_idle'], 80.22, 4, 345, False, None),
                                        ('0000:00:07.0', [], 683.51, 1653, 1980, False, None)]),
    ('nvsmi_query_gpu_nounits.txt', FIELDS, [('0000:00:06.0', ['gpu_idle'], 80.14, 0, 345, False, None),
                                             ('0000:00:07.0', ['gpu_idle'], 77.81, 0, 345, False, None)]),
])
def test_query_gpu_real(name, fields, expected):
    parsed = G.parse_query_gpu(fixture_text(*(REAL + (name,))), fields)
    assert parsed['unread'] == [] and parsed['bad_field'] is None
    assert parsed['driver_version'] == '580.159.04'
    got = [(g['bdf'], g['clock_reasons'], g['power_w'], g['memory_used_mib'], g['sm_clock_mhz'], g['remapped_rows_pending'],
            g['retired_pages_pending']) for g in parsed['gpus']]
    assert got == expected
    first = parsed['gpus'][0]
    assert (first['index'], first['name'], first['pstate'], first['power_limit_w'], first['memory_total_mib'], first['pcie_width_max']) == \
        (0, 'NVIDIA H200', 'P0', 700.0, 143771, 16)
    assert first['uuid'] == 'GPU-b07ca90c-46de-9ecd-7fbd-8229a3934242'


def test_query_gpu_old_reason_names_and_bad_field():
    parsed = G.parse_query_gpu(fixture_text(*(REAL + ('nvsmi_query_gpu_throttle.txt',))))
    assert [(g['index'], g['clock_reasons']) for g in parsed['gpus']] == [(0, ['gpu_idle']), (1, ['gpu_idle'])]
    assert G.field_name('clocks_throttle_reasons.hw_slowdown') == 'clocks_event_reasons.hw_slowdown'
    bad = G.parse_query_gpu(fixture_text(*(REAL + ('nvsmi_query_bad.txt',))))
    assert bad['bad_field'] == 'no.such.field' and bad['gpus'] == []


def test_query_gpu_values_nvidia_smi_has_none():
    text = 'index, pci.bus_id, power.draw [W], clocks_event_reasons.active, clocks_event_reasons.hw_slowdown, retired_pages.pending\n' \
           '0, 00000000:3B:00.0, [Not Supported], [N/A], Active, N/A\n'
    gpu = G.parse_query_gpu(text)['gpus'][0]
    assert gpu['bdf'] == '0000:3b:00.0' and gpu['power_w'] is None and gpu['retired_pages_pending'] is None
    assert gpu['clock_reasons'] == ['hw_slowdown']
    # The bitmask alone (nvml.h): 0x48 is hw_slowdown + hw_thermal_slowdown.
    gpu = G.parse_query_gpu('index, clocks_event_reasons.active\n0, 0x0000000000000048\n')['gpus'][0]
    assert gpu['clock_reasons'] == ['hw_slowdown', 'hw_thermal_slowdown']
    # Nothing said of the reasons: unknown (None), not "none active".
    assert G.parse_query_gpu('index, clocks_event_reasons.active\n0, [N/A]\n')['gpus'][0]['clock_reasons'] is None


def test_query_gpu_malformed_rows_named():
    parsed = G.parse_query_gpu('index, pci.bus_id\n0, 00000000:00:06.0\nbroken row with, too, many\n')
    assert [g['bdf'] for g in parsed['gpus']] == ['0000:00:06.0']
    assert parsed['unread'] == ['broken row with, too, many']
    # noheader without the field list: nothing read, every row named.
    assert G.parse_query_gpu('0, 00000000:00:06.0\n')['unread'] == ['0, 00000000:00:06.0']


@pytest.mark.parametrize('name, fields, expected', [
    ('nvsmi_apps_busy.txt', G.APPS_FIELDS, [('0000:00:07.0', 3294, 'python3', 1644)]),
    ('nvsmi_apps_busy_nounits.txt', G.APPS_FIELDS, [('0000:00:07.0', 3294, 'python3', 1644)]),
    ('nvsmi_apps_idle.txt', G.APPS_FIELDS, []),
    ('nvsmi_apps_after.txt', G.APPS_FIELDS, []),
])
def test_compute_apps_real(name, fields, expected):
    parsed = G.parse_compute_apps(fixture_text(*(REAL + (name,))), fields)
    assert [(p['bdf'], p['pid'], p['name'], p['used_mib']) for p in parsed['processes']] == expected
    assert parsed['unread'] == []


def test_compute_apps_public_header_names():
    parsed = G.parse_compute_apps(fixture_text(*(PUBLIC + ('apps_dcgm_exporter_94_uuid_name.txt',))))
    assert [(p['uuid'][:12], p['name'], p['pid']) for p in parsed['processes']] == [
        ('GPU-d0180485', 'vgpu', None), ('GPU-777ead31', 'vgpu', None), ('GPU-777ead31', 'vgpu', None)]


def test_compute_apps_name_with_a_comma_and_bounds():
    text = 'gpu_bus_id, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n00000000:00:07.0, GPU-x, 7, /opt/a,b/run, 12 MiB\n'
    assert [(p['name'], p['used_mib']) for p in G.parse_compute_apps(text)['processes']] == [('/opt/a, b/run', 12)]
    many = 'gpu_bus_id, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n' + \
        ''.join('00000000:00:07.0, GPU-x, %d, p, 1 MiB\n' % n for n in range(1000))
    parsed = G.parse_compute_apps(many)
    assert len(parsed['processes']) == G.PROCESSES_MAX and 'the rest not read' in parsed['unread'][-1]


def test_nvlink_real_and_public():
    status = G.parse_nvlink_status(fixture_text(*(REAL + ('nvsmi_nvlink_s.txt',))))
    assert [(s['links'], s['active'], s['inactive'], s['speed_gbs']) for s in status['gpus'].values()] == [(18, 18, [], 26.562)] * 2
    errors = G.parse_nvlink_errors(fixture_text(*(REAL + ('nvsmi_nvlink_e.txt',))))
    assert list(errors.values()) == [{'replay': 0, 'recovery': 0, 'crc': 0}] * 2
    v100 = G.parse_nvlink_status(fixture_text(*(PUBLIC + ('nvlink_s_azhpc_diagnostics_73_v100_inactive.txt',))))
    assert [(s['index'], s['links'], s['active'], s['inactive'], s['speed_gbs']) for s in v100['gpus'].values()] == \
        [(3, 6, 4, [3, 5], 25.781)]
    gb200 = G.parse_nvlink_status(fixture_text(*(PUBLIC + ('nvlink_s_k8s_test_infra_371_gb200.txt',))))
    assert [(s['links'], s['active'], s['speed_gbs']) for s in gb200['gpus'].values()] == [(18, 18, 53.125), (2, 2, 53.125)]


def test_nvlink_all_inactive_and_counts():
    status = G.parse_nvlink_status('GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t NVML: Unable to retrieve NVLink information as all links are inActive\n')
    assert status['gpus']['GPU-1']['all_inactive'] is True and status['gpus']['GPU-1']['active'] == 0
    errors = G.parse_nvlink_errors('GPU 0: X (UUID: GPU-1)\n\t Link 0: Replay Errors: 5\n\t Link 1: Replay Errors: 2\n'
                                   '\t Link 1: CRC FLIT Errors: 1\n\t Link 1: CRC Data Errors: N/A\n')
    assert errors == {'GPU-1': {'replay': 7, 'recovery': 0, 'crc': 1}}


@pytest.mark.parametrize('name, expected', [
    ('xid_gpud_46_dmesg_ctime_13_109.txt', [('0000:cb:00.0', 13, 'info', 3), ('0000:cb:00.0', 109, 'warning', 1)]),
    ('xid_ogkm_1150_journal_45.txt', [('0000:97:00.0', 45, 'info', 1), ('0000:dc:00.0', 45, 'info', 2),
                                      ('0000:ba:00.0', 45, 'info', 2), ('0000:ed:00.0', 45, 'info', 2)]),
    ('xid_gpud_1174_kmsg_149_145_94.txt', [('0019:01:00.0', 149, 'error', 1), ('0000:00:00.0', 149, 'error', 1),
                                           ('0018:01:00.0', 145, 'warning', 1), ('0000:9b:00.0', 94, 'error', 1)]),
    ('xid_nvsentinel_155_fallen_off_multiline.txt', [('0000:b3:00.0', 79, 'error', 1), ('0000:44:00.0', 79, 'error', 1)]),
    ('xid_bumblebee_677_32_31.txt', [('0000:01:00.0', 32, 'warning', 2), ('0000:01:00.0', 31, 'info', 1)]),
])
def test_xid_public(name, expected):
    events = G.parse_xid(fixture_text(*(PUBLIC + (name,))))
    assert [(e['bdf'], e['xid'], e['severity'], e['count']) for e in events] == expected


def test_xid_real_node_has_none_and_kmsg_records():
    assert G.parse_xid(fixture_text(*(REAL + ('dmesg_xid.txt',)))) == []
    events = G.parse_xid('3,2001,1843308145,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=12, name=x, GPU has fallen off the bus.\n')
    assert [(e['bdf'], e['xid'], e['kind'], e['text']) for e in events] == [
        ('0000:3b:00.0', 79, 'hardware', 'pid=12, name=x, GPU has fallen off the bus.')]


def test_xid_hostile_log_bounded():
    lines = ''.join('NVRM: Xid (PCI:0000:%02x:00): %d, %s\n' % (n % 256, 1000 + n, 'x' * 10000) for n in range(5000))
    events = G.parse_xid(lines)
    assert len(events) == G.XID_MAX and all(len(e['text']) <= 300 for e in events)
    # The newest kept; an XID missing from the catalog is a warning, not ignored.
    assert events[-1]['xid'] == 5999 and events[-1]['severity'] == 'warning'


def test_bdf_forms():
    assert G.bdf('00000000:00:06.0') == '0000:00:06.0'
    assert G.bdf('PCI:0000:3B:00') == '0000:3b:00.0'
    assert G.bdf('0001:1a:00.1') == '0001:1a:00.1'
    assert G.bdf('123456789:00:00.0') is None and G.bdf('../../etc') is None and G.bdf(None) is None


def test_monitoring_agents_are_not_jobs():
    procs = [{'pid': 1, 'name': 'nv-hostengine', 'used_mib': 300}, {'pid': 2, 'name': '/usr/bin/dcgm-exporter', 'used_mib': 280},
             {'pid': 3, 'name': 'nv-hostengine', 'used_mib': 40000}, {'pid': 4, 'name': 'python3', 'used_mib': 1644},
             {'pid': 5, 'name': 'my-agent', 'used_mib': 100}, {'pid': 6, 'name': 'all_reduce_perf', 'used_mib': 900}]
    assert [p['pid'] for p in G.foreign_processes(procs)] == [3, 4, 5, 6]
    assert [p['pid'] for p in G.foreign_processes(procs, own_pids=[6], extra_names=['my-agent'])] == [3, 4]


class FakeTool(object):
    """Answers as nvidia-smi of tests/fixtures/real/h200x2/state does; ``refuse`` fields it does not know."""

    def __init__(self, refuse=(), nvlink=True):
        self.calls = []
        self.refuse = refuse
        self.nvlink = nvlink

    def __call__(self, argv):
        self.calls.append(argv[1:])
        if argv[1].startswith('--query-gpu='):
            fields = argv[1].split('=', 1)[1].split(',')
            for field in fields:
                if field in self.refuse:
                    return 'Field "%s" is not a valid field to query.\n\n' % field, '', 'rc 2: Field "%s" is not a valid field to query.' % field
            return fixture_text(*(REAL + ('nvsmi_query_gpu.txt',))), '', None
        if argv[1].startswith('--query-compute-apps='):
            return fixture_text(*(REAL + ('nvsmi_apps_busy.txt',))), '', None
        if argv[1:] == ['nvlink', '-s']:
            return (fixture_text(*(REAL + ('nvsmi_nvlink_s.txt',))) if self.nvlink else ''), '', None
        if argv[1:] == ['nvlink', '-e']:
            return fixture_text(*(REAL + ('nvsmi_nvlink_e.txt',))), '', None
        raise AssertionError(argv)


class Root(object):
    def __init__(self, files):
        self.files = files

    def text(self, rel, quiet=False):
        return self.files.get(rel)


def test_read_gpu_state_four_calls():
    tool = FakeTool()
    root = Root({'proc/3294/status': 'Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\n', 'etc/passwd': 'alice:x:1000:1000::/:/bin/sh\n'})
    facts = G.read_gpu_state(tool, '/usr/bin/nvidia-smi', root, lambda: ('', None))
    assert [c[0].split('=')[0] for c in tool.calls] == ['--query-gpu', '--query-compute-apps', 'nvlink', 'nvlink']
    assert facts['not_read'] == {} and facts['driver_version'] == '580.159.04'
    assert facts['processes'][0]['user'] == 'alice'
    assert [g['nvlink']['active'] for g in facts['gpus']] == [18, 18]


def test_read_gpu_state_without_nvlink_asks_no_counters():
    tool = FakeTool(nvlink=False)
    facts = G.read_gpu_state(tool, 'nvidia-smi', Root({}), lambda: ('', None))
    assert ['nvlink', '-e'] not in tool.calls and [g['nvlink'] for g in facts['gpus']] == [None, None]
    assert facts['processes'][0]['user'] is None


def test_read_gpu_state_driver_refusing_a_field():
    tool = FakeTool(refuse=('remapped_rows.failure',))
    facts = G.read_gpu_state(tool, 'nvidia-smi', Root({}), lambda: ('', None), ('gpus',))
    assert len([c for c in tool.calls if c[0].startswith('--query-gpu')]) == 2
    assert facts['fields_left_out'] == ['remapped_rows.failure'] and len(facts['gpus']) == 2
    # The new names of the clock reasons refused: asked again under their old names.
    tool = FakeTool(refuse=('clocks_event_reasons.active',))
    G.read_gpu_state(tool, 'nvidia-smi', Root({}), lambda: ('', None), ('gpus',))
    assert 'clocks_throttle_reasons.active' in tool.calls[-1][0]


def test_missing_tool_is_not_read_never_ok():
    facts = G.read_gpu_state(FakeTool(), None, Root({}), lambda: ('', 'dmesg: Operation not permitted'))
    assert facts['tool'] is None and facts['gpus'] == []
    assert sorted(facts['not_read']) == ['gpus', 'nvlink', 'processes', 'xid']
    assert facts['not_read']['xid'] == 'dmesg: Operation not permitted'


def test_every_fixture_of_the_directory_is_tested():
    """A public fixture added to tests/fixtures/public/gpu_state without a case here fails this."""
    tested = set(['nvlink_s_azhpc_diagnostics_73_v100_inactive.txt', 'nvlink_s_k8s_test_infra_371_gb200.txt',
                  'apps_dcgm_exporter_94_uuid_name.txt', 'xid_gpud_46_dmesg_ctime_13_109.txt', 'xid_ogkm_1150_journal_45.txt',
                  'xid_gpud_1174_kmsg_149_145_94.txt', 'xid_nvsentinel_155_fallen_off_multiline.txt', 'xid_bumblebee_677_32_31.txt'])
    assert set(os.listdir(fixture_path(*PUBLIC))) == tested
