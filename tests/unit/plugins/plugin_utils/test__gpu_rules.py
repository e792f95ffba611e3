# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""rules/_gpu.py: each GPU state root sits on its GPU and the node's GPUs and explains only the
symptoms on that path; a monitoring agent on every GPU, idle clocks and a software power cap are
healthy; the idle gate's processes make a slow node's own run contaminated, never a hardware verdict."""

from __future__ import annotations

import copy

from ansible_collections.hpc.gpu_fabric.plugins.filter import collective as collective_filter
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _findings
from tests.bench import _accuracy_gpu_state

BDFS = ('0000:00:06.0', '0000:00:07.0')


def gpu(bdf, index, **changes):
    state = {'bdf': bdf, 'index': index, 'name': 'NVIDIA H200', 'clock_reasons': ['gpu_idle'], 'sm_clock_mhz': 345,
             'sm_clock_max_mhz': 1980, 'temperature_c': 35, 'power_w': 80.1, 'power_limit_w': 700.0,
             'remapped_rows_pending': False, 'remapped_rows_failure': False, 'retired_pages_pending': None,
             'nvlink': {'links': 18, 'active': 18, 'inactive': [], 'speed_gbs': 26.562, 'errors': {'replay': 0, 'recovery': 0, 'crc': 0}}}
    state.update(changes)
    return state


def node(processes=(), xid=(), not_read=None, **gpu_changes):
    """A node of the real H200 machine's shape: gdr's GPU0/GPU1 and the GPU state's facts."""
    gpus = [gpu(BDFS[0], 0), gpu(BDFS[1], 1, **gpu_changes)]
    return {'ib': {'devices': []},
            'gdr': {'gpus': [{'name': 'GPU%d' % n, 'pci_address': bdf, 'vendor': 'nvidia'} for n, bdf in enumerate(BDFS)], 'nics': []},
            'gpu': {'tool': 'nvidia-smi', 'gpus': gpus, 'processes': list(processes), 'xid': list(xid), 'not_read': not_read or {},
                    'monitoring_agents': []}}


def codes(found, host='b', above_info=True):
    return sorted((f['code'], f['subject']) for f in found if f['host'] == host and (f['severity'] != 'info' or not above_info)
                  and f['code'].startswith('GPU_'))


PYTHON = {'bdf': BDFS[1], 'pid': 3294, 'name': 'python3', 'used_mib': 1644, 'user': 'alice'}
DCGM = [{'bdf': bdf, 'pid': 900 + n, 'name': 'nv-hostengine', 'used_mib': 310, 'user': 'root'} for n, bdf in enumerate(BDFS)]


def test_healthy_and_the_dcgm_trap_say_nothing():
    nodes = {'a': node(), 'b': node(processes=DCGM)}
    assert codes(_diagnose.diagnose(nodes), 'a') == [] and codes(_diagnose.diagnose(nodes), 'b') == []
    # The same agent holding 40 GiB is a job.
    heavy = [dict(DCGM[1], used_mib=40000)]
    assert codes(_diagnose.diagnose({'b': node(processes=heavy)})) == [('GPU_BUSY', BDFS[1])]


def test_a_foreign_process_is_a_warning_naming_it():
    found = _diagnose.diagnose({'a': node(), 'b': node(processes=[PYTHON])})
    busy = [f for f in found if f['code'] == 'GPU_BUSY']
    assert [(f['host'], f['severity'], f['at']) for f in busy] == [('b', 'warning', [['gpu', 'b', 'GPU1'], ['gpus', 'b']])]
    assert 'pid 3294 python3 of alice, 1644 MiB' in busy[0]['cause']


def test_clock_reasons_only_the_faults():
    for reasons in (['gpu_idle'], ['sw_power_cap'], ['applications_clocks_setting'], ['sync_boost'], [], None):
        assert codes(_diagnose.diagnose({'b': node(clock_reasons=reasons)})) == [], reasons
    found = _diagnose.diagnose({'b': node(clock_reasons=['hw_slowdown', 'sw_power_cap'])})
    assert [(f['code'], f['severity'], f['evidence']['reasons']) for f in found if f['code'] == 'GPU_CLOCKS_THROTTLED'] == [
        ('GPU_CLOCKS_THROTTLED', 'error', ['hw_slowdown'])]
    found = _diagnose.diagnose({'b': node(clock_reasons=['sw_thermal_slowdown'])})
    assert [f['severity'] for f in found if f['code'] == 'GPU_CLOCKS_THROTTLED'] == ['warning']


def test_nvlink_down_against_its_peers_and_errors():
    link = {'links': 18, 'active': 16, 'inactive': [3, 5], 'speed_gbs': 26.562, 'errors': {'replay': 0, 'recovery': 2, 'crc': 0}}
    found = _diagnose.diagnose({'a': node(), 'b': node(nvlink=link)})
    assert codes(found) == [('GPU_NVLINK_DOWN', BDFS[1]), ('GPU_NVLINK_ERRORS', BDFS[1])]
    # A model without NVLink (nvlink None) on every GPU: nothing to compare.
    assert codes(_diagnose.diagnose({'b': node(nvlink=None)})) == []


def test_xid_by_the_catalog_severity():
    xid = [{'bdf': BDFS[1], 'xid': 79, 'kind': 'hardware', 'severity': 'error', 'count': 1, 'text': 'GPU has fallen off the bus.'},
           {'bdf': BDFS[1], 'xid': 13, 'kind': 'application', 'severity': 'info', 'count': 3, 'text': 'Graphics SM Warp Exception'}]
    found = _diagnose.diagnose({'b': node(xid=xid)})
    got = sorted((f['subject'], f['severity'], f['at']) for f in found if f['code'] == 'GPU_XID')
    assert got == [('0000:00:07.0/xid13', 'info', [['services', 'b']]),
                   ('0000:00:07.0/xid79', 'error', [['gpu', 'b', 'GPU1'], ['gpus', 'b']])]


def test_remap_pending_and_failure():
    assert [f['severity'] for f in _diagnose.diagnose({'b': node(remapped_rows_pending=True)})
            if f['code'] == 'GPU_MEMORY_REMAP_PENDING'] == ['warning']
    assert [f['severity'] for f in _diagnose.diagnose({'b': node(remapped_rows_failure=True)})
            if f['code'] == 'GPU_MEMORY_REMAP_PENDING'] == ['error']


def test_not_read_is_info_and_only_where_there_are_gpus():
    found = _diagnose.diagnose({'b': node(not_read={'xid': '/dev/kmsg: Permission denied; dmesg: rc 1'})})
    assert [(f['code'], f['severity']) for f in found if f['code'] == 'GPU_STATE_NOT_READ'] == [('GPU_STATE_NOT_READ', 'info')]
    bare = node(not_read={'gpus': 'nvidia-smi not found on the PATH'})
    bare['gdr']['gpus'], bare['gpu']['gpus'] = [], []
    assert [f for f in _diagnose.diagnose({'b': bare}) if f['code'] == 'GPU_STATE_NOT_READ'] == []


def local_run(busbw):
    return {'status': 'ok', 'benchmark': 'all_reduce_perf', 'max_busbw_gbs': busbw, 'avg_busbw_gbs': busbw, 'ranks': [0, 1], 'env': {},
            'verdict': {'status': 'unknown', 'reasons': []}}


def hostvars(busbw_b, gate_b):
    """hostvars of three nodes after role fabric_collective (launcher local), b with its idle gate's answer."""
    def host(busbw, gate):
        return {'__fabric_collective_local': local_run(busbw),
                '__fabric_collective_gpu_gate': {'gpu_fabric_gpu': {'processes': gate, 'not_read': {}, 'monitoring_agents': []}}}
    return {'a': host(330.1, DCGM), 'c': host(331.0, []), 'b': host(busbw_b, gate_b)}


def test_the_gate_makes_the_slow_run_contaminated_and_explains_it():
    local = collective_filter.collective_local_verdict(hostvars(149.5, DCGM + [PYTHON]), ['a', 'b', 'c'])
    assert local['slow'] == ['b'] and local['hosts']['b']['gpu_gate']['processes'] == [PYTHON]
    # The DCGM agent on a's GPUs is not a process on them.
    assert local['hosts']['a']['gpu_gate']['processes'] == []
    nodes = {'a': node(), 'b': node(), 'c': node()}
    found = _diagnose.diagnose(nodes, collective={'nodes': local})
    slow = [f for f in found if f['code'] == 'COLLECTIVE_NODE_SLOW']
    assert [(f['host'], f['explained_by']) for f in slow] == [('b', 'GPU_BUSY@b/0000:00:07.0')]
    busy = [f for f in found if f['code'] == 'GPU_BUSY']
    assert len(busy) == 1 and busy[0]['evidence']['contaminated'] is True and 'contaminated' in busy[0]['cause']
    # Never a hardware culprit: no other GPU or collective root on b (its missing RDMA NIC is this test node's shape).
    assert [f['code'] for f in found if f['host'] == 'b' and f['explained_by'] is None and f['severity'] != 'info'
            and f['code'] != 'GDR_NO_RDMA_NIC'] == ['GPU_BUSY']


def test_a_root_explains_only_symptoms_on_its_own_path():
    local = collective_filter.collective_local_verdict(hostvars(149.5, []), ['a', 'b', 'c'])
    nodes = {'a': node(clock_reasons=['hw_thermal_slowdown', 'hw_slowdown']), 'b': node(), 'c': node()}
    found = _diagnose.diagnose(nodes, collective={'nodes': local})
    slow = [f for f in found if f['code'] == 'COLLECTIVE_NODE_SLOW']
    # a's throttled GPU is a's root; b's slow run goes through b's GPUs only.
    assert [(f['host'], f['explained_by']) for f in slow] == [('b', None)]
    nodes = {'a': node(), 'b': node(clock_reasons=['hw_slowdown']), 'c': node()}
    found = _diagnose.diagnose(nodes, collective={'nodes': local})
    assert [f['explained_by'] for f in found if f['code'] == 'COLLECTIVE_NODE_SLOW'] == ['GPU_CLOCKS_THROTTLED@b/0000:00:07.0']


def test_a_gate_that_read_nothing_changes_nothing():
    vars_ = hostvars(149.5, [])
    vars_['b']['__fabric_collective_gpu_gate'] = {'skipped': True}
    local = collective_filter.collective_local_verdict(vars_, ['a', 'b', 'c'])
    assert 'gpu_gate' not in local['hosts']['b']
    plain = _collective.judge_nodes({'a': local_run(330.0), 'b': copy.deepcopy(local_run(149.0))})
    assert 'gpu_gate' not in plain['hosts']['b'] and plain['slow'] == ['b']


def test_facts_read_before_the_pairwise_benchmark_make_it_contaminated():
    facts = node(processes=[PYTHON])
    facts['gpu']['before_benchmark'] = True
    busy = [f for f in _diagnose.diagnose({'b': facts}) if f['code'] == 'GPU_BUSY']
    assert busy[0]['evidence']['contaminated'] is True and 'contaminated' in busy[0]['cause']
    # The symptom that names its own contamination names GPU_BUSY before any other root on its path.
    assert _findings.named('GPU_BUSY', {'code': 'COLLECTIVE_NODE_SLOW', 'evidence': {'contaminated': [PYTHON]}})
    assert not _findings.named('GPU_BUSY', {'code': 'COLLECTIVE_NODE_SLOW', 'evidence': {}})


def test_accuracy_on_the_simulator():
    """tests/bench/_accuracy_gpu_state.py: each class on its own GPU, the traps clean (about 90 s)."""
    result = _accuracy_gpu_state.run()
    assert (result['right'], result['total'], result['false_positives'], result['misattributed']) == (5, 5, 0, 0), result


def test_a_clock_held_within_a_tenth_of_its_maximum_is_only_said():
    # The real 4 x H200 node under matrix products: sw_thermal_slowdown at 1965 of 1980 MHz.
    found = _diagnose.diagnose({'b': node(clock_reasons=['sw_thermal_slowdown'], sm_clock_mhz=1965, sm_clock_max_mhz=1980)})
    held = [f for f in found if f['code'] == 'GPU_CLOCKS_THROTTLED']
    assert [(f['severity'], f['at']) for f in held] == [('info', [['gpu_clock', 'b', 'GPU1']])]
    # Held to 1200 of 1980 MHz: a root on its GPU.
    found = _diagnose.diagnose({'b': node(clock_reasons=['sw_thermal_slowdown'], sm_clock_mhz=1200, sm_clock_max_mhz=1980)})
    assert [(f['severity'], f['at']) for f in found if f['code'] == 'GPU_CLOCKS_THROTTLED'] == [
        ('warning', [['gpu', 'b', 'GPU1'], ['gpus', 'b']])]


def test_the_gate_keeps_only_the_gpus_the_run_used():
    # One host split into two inventory nodes (CUDA_VISIBLE_DEVICES): nvidia-smi shows b's process to a as well,
    # but a's run used only its own GPU (nccl-tests' 'Using devices' names its bus), so a's run is not contaminated.
    other = dict(PYTHON, bdf='0000:00:09.0')
    variables = hostvars(149.5, [other])
    variables['a']['__fabric_collective_gpu_gate'] = {'gpu_fabric_gpu': {'processes': [other], 'not_read': {}, 'monitoring_agents': []}}
    variables['a']['__fabric_collective_local']['ranks'] = [{'rank': 0, 'bus_id': '0000:00:06'}, {'rank': 1, 'bus_id': '0000:00:07'}]
    variables['b']['__fabric_collective_local']['ranks'] = [{'rank': 0, 'bus_id': '0000:00:08'}, {'rank': 1, 'bus_id': '0000:00:09'}]
    local = collective_filter.collective_local_verdict(variables, ['a', 'b', 'c'])
    assert local['hosts']['a']['gpu_gate']['processes'] == [] and local['hosts']['a']['gpu_gate']['gpus'] == ['0000:00:06', '0000:00:07']
    assert local['hosts']['b']['gpu_gate']['processes'] == [other]
