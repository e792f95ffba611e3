# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _host
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.bench import diagnosis_accuracy


def test_every_catalog_fault_alone_and_in_pairs_is_diagnosed_as_a_root():
    result = diagnosis_accuracy.run()
    assert result['cases'] >= 30 and result['wrong'] == [], result['wrong']
    # Fault-free profiles: nothing above info, except the homelab node's real limits
    # (seed 002: GPU on the other socket, inbox stack without nvidia_peermem) and its host
    # layer as it was before the seed's Pre-Test Setup (powersave, 8 MiB memlock, no modules-load.d).
    # The real 2 x H200 node without an RDMA device (tests/sim/profiles/h200x2_no_rdma.yml): no
    # fault injected, and still not a fabric node: NCCL has only its socket transport there.
    healthy = result['healthy_findings_above_info']
    # The VM without GPU and RDMA (tests/fixtures/real/cpu-vm-no-rdma): nothing could be checked.
    assert all(codes == [] for name, codes in healthy.items()
               if name not in ('homelab_cx4', 'h200x2_no_rdma', 'no_rdma_vm')), healthy
    assert healthy['h200x2_no_rdma'] == ['GDR_NO_RDMA_NIC']
    assert healthy['no_rdma_vm'] == ['HOST_NOTHING_TO_CHECK']
    assert sorted(healthy['homelab_cx4']) == ['GDR_PEERMEM_NOT_LOADED', 'GPU_NIC_FAR', 'HOST_CPU_GOVERNOR',
                                              'HOST_MEMLOCK_LIMITED', 'HOST_MODULES_NOT_PERSISTENT']
    # Healthy but unusual (issue 22): an extra storage card, twelve HCAs, two GPU models, a RoCE
    # management port - nothing above info, alone and in fleets (with peers of the usual profile too).
    assert len(result['unusual_findings_above_info']) == 4 and len(result['unusual_fleet_findings_above_info']) >= 7
    assert all(codes == [] for codes in result['unusual_findings_above_info'].values()), result['unusual_findings_above_info']
    assert all(codes == [] for codes in result['unusual_fleet_findings_above_info'].values()), \
        result['unusual_fleet_findings_above_info']
    # Links (issue 22): every pair symptom of the cases explained by a root of one of the faults that
    # touched its test, on that fault's node; every explained finding's root on its path; the
    # known faults' symptoms explained; faults no rule names said on their own device, never another.
    links = result['links']
    assert links['symptoms'] > 1000 and links['explained_right'] == links['symptoms'], links
    assert links['misattributed'] == links['off_path'] == links['unexplained_known'] == links['unknown_wrong'] == []
    assert all(case['right'] for case in result['unknown'].values()), result['unknown']
    assert result['two_nodes']['right'], result['two_nodes']


def test_seed000_chain_shows_the_root_not_the_symptoms():
    nodes = {'m1': diagnosis_accuracy.node_facts('metax_c500_cx7'),
             'm4': diagnosis_accuracy.node_facts('metax_c500_cx7', ('mm_kobj_not_exported',))}
    bench = {'pairs': [{'server': 'm1', 'client': 'm4', 'rail': 0, 'memory': 'gpu', 'status': 'ok', 'verdict': 'low',
                        'bw_avg_gbps': 120.0, 'port_rate_gbps': 400.0, 'gpu_vs_host': 0.31,
                        'reasons': ['GPU memory 120.0 Gb/s is 31 % of host memory 388.0 Gb/s on the same pair']}]}
    collective = {'fleet': {'benchmark': 'all_reduce_perf', 'verdict': {'status': 'low', 'ratio': 0.41, 'reasons': ['41 %']},
                            'transport': {'net': 'IB', 'gdr': False}, 'hosts': ['m1', 'm4']},
                  'search': {'culprits': ['m4'], 'unresolved': [], 'runs': [{'group': ['m4'], 'hosts': ['m4', 'm1'], 'status': 'low'}]}}
    found = _diagnose.diagnose(nodes, bench, collective, unreachable=['m9'])
    by_code = dict((f['code'], f) for f in found)
    root = by_code['GDR_MM_KOBJ_NOT_EXPORTED']
    assert root['host'] == 'm4' and root['explained_by'] is None and root['severity'] == 'error'
    assert 'does not export mm_kobj' in root['cause'] and 'ofed_peermem' in root['remedy']
    # GPU memory low on a pair with m4, the culprit m4, and the fleet-wide low busbw: all point at the root.
    for code in ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT', 'COLLECTIVE_BUSBW_LOW'):
        assert by_code[code]['explained_by'] == root['id'], (code, by_code[code])
    assert by_code['HOST_UNREACHABLE']['host'] == 'm9'
    assert [f['layer'] for f in found] == sorted((f['layer'] for f in found), key=_diagnose.LAYERS.index)


def test_fleet_mtu_mismatch_and_port_symptoms():
    def port(mtu, state='ACTIVE', rate=400.0, width='4X'):
        return {'port': 1, 'state': state, 'phys_state': 'LinkUp' if state == 'ACTIVE' else 'Polling', 'rate_gbps': rate,
                'rate': '%g Gb/sec (%s NDR)' % (rate, width), 'width': width, 'link_layer': 'InfiniBand', 'active_mtu': mtu,
                'counters': {}, 'gids': []}
    nodes = {'a': {'ib': {'devices': [{'name': 'mlx5_0', 'ports': [port(4096)]}, {'name': 'mlx5_1', 'ports': [port(4096, rate=100.0, width='1X')]}]}},
             'b': {'ib': {'devices': [{'name': 'mlx5_0', 'ports': [port(4096)]}]}},
             'c': {'ib': {'devices': [{'name': 'mlx5_0', 'ports': [port(2048)]}, {'name': 'mlx5_1', 'ports': [port(None, 'DOWN')]}]}}}
    found = dict(((f['code'], f['host'], f['subject']), f) for f in _diagnose.diagnose(nodes))
    assert ('MTU_MISMATCH', 'c', 'mlx5_0') in found and found[('MTU_MISMATCH', 'c', 'mlx5_0')]['evidence']['most_ports'] == 4096
    assert ('IB_RATE_DEGRADED', 'a', 'mlx5_1/1') in found
    down = found[('IB_PORT_DOWN', 'c', 'mlx5_1/1')]
    assert 'no link partner' in down['cause'] and down['severity'] == 'error'
    assert not any(k[0] == 'MTU_MISMATCH' and k[1] in ('a', 'b') for k in found)


# ---------------------------------------------------------------------------- host layer

def host_node(nics=('mlx5_0',), ofed='MLNX_OFED_LINUX-24.10-1.1.4.0', **host):
    """gdr facts with a host part: a healthy configured node unless ``host`` says otherwise."""
    facts = {'cpufreq': True, 'cpu_governors': {'performance': 16},
             'memlock': {'soft': 'unlimited', 'hard': 'unlimited', 'cap_ipc_lock': False, 'limits_conf': [], 'systemd': []},
             'modules_loaded': ['ib_core', 'ib_uverbs', 'mlx5_ib', 'nvidia', 'nvidia_peermem'],
             'modules_persistent': {'nvidia_peermem': ['/etc/modules-load.d/gpu-fabric.conf']},
             'default_route_interface': 'eth0'}
    facts.update(host)
    return {'gdr': {'nics': [{'name': name} for name in nics], 'ofed': {'version': ofed}, 'host': facts}}


def host_codes(node):
    return dict((f['code'], f) for f in _diagnose.diagnose({'n': node}) if f['layer'] == 'host')


def memlock(soft, cap=False, limits_conf=(), systemd=()):
    return {'soft': soft, 'hard': soft, 'cap_ipc_lock': cap, 'limits_conf': list(limits_conf), 'systemd': list(systemd)}


def test_seed002_homelab_host_findings():
    found = host_codes(diagnosis_accuracy.node_facts('homelab_cx4'))
    governor = found['HOST_CPU_GOVERNOR']
    assert governor['severity'] == 'warning' and governor['layer'] == 'host' and governor['host'] == 'n'
    assert '8 of 8 CPUs run powersave' in governor['cause'] and 'CPU Frequency is not max' in governor['cause']
    assert governor['remedy'] == 'run playbooks/configure.yml --tags cpu_governor (role cpu_governor: performance now and at every boot)'
    limited = found['HOST_MEMLOCK_LIMITED']
    # EL9's 8 MiB is below the 16 MiB one ib_write_bw of 8 MiB messages registers.
    assert limited['severity'] == 'error' and limited['evidence']['soft'] == 8388608
    assert 'may lock 8 MiB' in limited['cause'] and 'below the 16 MiB' in limited['cause']
    assert '--tags memlock' in limited['remedy']
    modules = found['HOST_MODULES_NOT_PERSISTENT']
    # No OFED there: nothing but modules-load.d brings the user-space RDMA modules back.
    assert modules['evidence']['not_persistent'] == ['ib_uverbs', 'ib_umad', 'ib_ipoib']
    assert modules['severity'] == 'warning' and '--tags rdma_modules' in modules['remedy']


def test_host_rules_are_silent_on_a_configured_node_and_on_older_facts():
    assert host_codes(host_node()) == {}
    # Facts gathered before gdr_facts returned 'host', or no gdr facts at all.
    node = host_node()
    del node['gdr']['host']
    assert host_codes(node) == {}
    # No gdr facts and no RDMA device: the host rules say nothing, but the node is not "ok" either.
    assert list(host_codes({'ib': {'devices': []}})) == ['HOST_NOTHING_TO_CHECK']
    # A VM without cpufreq; a node without RDMA NIC is not held to memlock or boot modules.
    assert host_codes(host_node(cpufreq=False, cpu_governors={})) == {}
    # (That node, with no GPU either, was not checked at all: said once, not as memlock or modules.)
    assert list(host_codes(host_node(nics=(), memlock=memlock(65536), modules_persistent={}))) == ['HOST_NOTHING_TO_CHECK']


def test_governor_counts_the_cpus_not_on_performance():
    found = host_codes(host_node(cpu_governors={'performance': 12, 'powersave': 3, 'schedutil': 1}))
    assert '4 of 16 CPUs run powersave, schedutil' in found['HOST_CPU_GOVERNOR']['cause']
    assert found['HOST_CPU_GOVERNOR']['evidence'] == {'governors': {'performance': 12, 'powersave': 3, 'schedutil': 1}}


def test_memlock_severity_follows_what_registration_needs():
    assert host_codes(host_node(memlock=memlock(65536)))['HOST_MEMLOCK_LIMITED']['severity'] == 'error'
    just_under = host_codes(host_node(memlock=memlock(_diagnose.MEMLOCK_NEEDED_BYTES - 4096)))['HOST_MEMLOCK_LIMITED']
    assert just_under['severity'] == 'error'
    enough = host_codes(host_node(memlock=memlock(64 << 20)))['HOST_MEMLOCK_LIMITED']
    assert enough['severity'] == 'warning' and 'may lock 64 MiB' in enough['cause']
    # Configured unlimited, but this process did not get it: a login or a service started before the change.
    entry = {'domain': '*', 'type': 'soft', 'value': 'unlimited', 'bytes': 'unlimited', 'file': '/etc/security/limits.d/rdma.conf'}
    stale = host_codes(host_node(memlock=memlock(65536, limits_conf=[entry])))['HOST_MEMLOCK_LIMITED']
    assert stale['severity'] == 'error' and '/etc/security/limits.d/rdma.conf configure unlimited' in stale['cause']


def test_memlock_of_a_process_with_cap_ipc_lock():
    # Root is not held to the limit (ib_umem_get): a warning for other users' jobs, when nothing raises it for them.
    found = host_codes(host_node(memlock=memlock(8388608, cap=True)))['HOST_MEMLOCK_LIMITED']
    assert found['severity'] == 'warning' and 'CAP_IPC_LOCK' in found['cause']
    systemd = {'value': 'infinity', 'soft': 'unlimited', 'hard': 'unlimited', 'file': '/etc/systemd/system.conf.d/90-gpu-fabric-memlock.conf'}
    assert host_codes(host_node(memlock=memlock(8388608, cap=True, systemd=[systemd]))) == {}
    # An entry for root only does not reach other users.
    root_only = {'domain': 'root', 'type': 'soft', 'value': 'unlimited', 'bytes': 'unlimited', 'file': '/etc/security/limits.conf'}
    assert 'HOST_MEMLOCK_LIMITED' in host_codes(host_node(memlock=memlock(8388608, cap=True, limits_conf=[root_only])))


def test_modules_judged_by_what_brings_them_back():
    # MLNX OFED's openibd loads the RDMA stack at boot: only the peer-memory module is judged.
    found = host_codes(host_node(modules_persistent={}))['HOST_MODULES_NOT_PERSISTENT']
    assert found['evidence']['not_persistent'] == ['nvidia_peermem']
    assert 'GDR_PEERMEM_NOT_LOADED' in found['cause'] and 'after the next reboot it is not loaded' in found['cause']
    # Without OFED, the user-space modules too, unless rdma-core's /etc/rdma/modules lists them.
    inbox = host_node(ofed=None, modules_persistent={'nvidia_peermem': ['/etc/modules-load.d/hpc.conf']})
    assert host_codes(inbox)['HOST_MODULES_NOT_PERSISTENT']['evidence']['not_persistent'] == ['ib_uverbs']
    inbox['gdr']['host']['modules_persistent']['ib_uverbs'] = ['/etc/rdma/modules/rdma.conf']
    assert host_codes(inbox) == {}
    # Not loaded is not this finding (GDR_PEERMEM_NOT_LOADED says it).
    assert host_codes(host_node(modules_loaded=['ib_core', 'ib_uverbs'], modules_persistent={})) == {}


def test_memlock_limited_explains_the_failed_pair_and_the_culprit():
    nodes = {'h1': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr'),
             'h2': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('memlock_limited',))}
    bench = {'pairs': [{'server': 'h1', 'client': 'h2', 'rail': 0, 'memory': 'host', 'status': 'failed', 'verdict': 'failed',
                        'bw_avg_gbps': None, 'port_rate_gbps': 400.0, 'failure': "Couldn't allocate MR",
                        'reasons': ["client: Couldn't allocate MR"]}]}
    collective = {'fleet': {'benchmark': 'all_reduce_perf', 'verdict': {'status': 'low', 'ratio': 0.2, 'reasons': ['20 %']},
                            'transport': {'net': 'IB'}, 'hosts': ['h1', 'h2']},
                  'search': {'culprits': ['h2'], 'unresolved': [], 'runs': [{'group': ['h2'], 'status': 'low'}]}}
    found = _diagnose.diagnose(nodes, bench, collective)
    by_code = dict((f['code'], f) for f in found)
    root = by_code['HOST_MEMLOCK_LIMITED']
    assert (root['host'], root['severity'], root['explained_by']) == ('h2', 'error', None)
    assert 'may lock 64 KiB' in root['cause']
    for code in ('BENCH_PAIR_FAILED', 'COLLECTIVE_CULPRIT', 'COLLECTIVE_BUSBW_LOW'):
        assert by_code[code]['explained_by'] == root['id'], (code, by_code[code])
    # The healthy peer has no host finding.
    assert not [f for f in found if f['host'] == 'h1']


def test_gpu_memory_that_cannot_be_registered_is_an_ib_gpu_symptom():
    # Seed 000 as perftest sees it: host memory passes on the pair, GPU memory fails (MR refused
    # without a memory_peers client). The failure is the GDR root's symptom, not a link fault;
    # a GPU-memory failure where host memory failed too stays a pair failure (the link).
    nodes = {'m1': diagnosis_accuracy.node_facts('metax_c500_cx7'),
             'm4': diagnosis_accuracy.node_facts('metax_c500_cx7', ('mm_kobj_not_exported',))}
    failed = {'status': 'failed', 'verdict': 'failed', 'bw_avg_gbps': None, 'reasons': ['mr_failed: Couldn\'t allocate MR']}
    bench = {'pairs': [dict(server='m1', client='m4', rail=0, memory='host', status='ok', verdict='ok', bw_avg_gbps=388.0),
                       dict(failed, server='m1', client='m4', rail=0, memory='gpu'),
                       dict(failed, server='m1', client='m4', rail=1, memory='host'),
                       dict(failed, server='m1', client='m4', rail=1, memory='gpu')]}
    found = _diagnose.diagnose(nodes, bench)
    root = [f for f in found if f['code'] == 'GDR_MM_KOBJ_NOT_EXPORTED'][0]
    by_subject = dict((f['subject'], f) for f in found if f['layer'] == 'benchmark')
    assert by_subject['m1->m4 rail 0 gpu']['code'] == 'BENCH_GPU_MEMORY_FAILED'
    assert by_subject['m1->m4 rail 0 gpu']['explained_by'] == root['id']
    assert by_subject['m1->m4 rail 1 gpu']['code'] == by_subject['m1->m4 rail 1 host']['code'] == 'BENCH_PAIR_FAILED'
    assert by_subject['m1->m4 rail 1 host']['explained_by'] is None


def test_a_node_lost_mid_run_is_named_and_explains_its_pairs():
    nodes = {'a': diagnosis_accuracy.node_facts('metax_c500_cx7'), 'b': diagnosis_accuracy.node_facts('metax_c500_cx7'),
             'c': diagnosis_accuracy.node_facts('metax_c500_cx7')}
    lost = {'status': 'failed', 'verdict': 'failed', 'bw_avg_gbps': None, 'memory': 'host', 'rail': 0,
            'failure': {'kind': 'node_lost', 'message': 'the client c returned no result'}, 'reasons': ['node_lost']}
    bench = {'pairs': [dict(server='a', client='b', rail=0, memory='host', status='ok', verdict='ok', bw_avg_gbps=388.0),
                       dict(lost, server='a', client='c')]}
    stages = {'a': ['validate', 'benchmark'], 'b': ['validate', 'benchmark'], 'c': ['validate']}
    found = _diagnose.diagnose(nodes, bench, None, [], stages)
    gone = [f for f in found if f['code'] == 'HOST_LOST']
    assert [f['host'] for f in gone] == ['c'] and gone[0]['evidence']['missing'] == ['benchmark']
    pair = [f for f in found if f['code'] == 'BENCH_PAIR_FAILED'][0]
    assert pair['explained_by'] == gone[0]['id']
    # Without stage marks (facts from elsewhere) nothing is called lost.
    assert not [f for f in _diagnose.diagnose(nodes, bench, None, [], None) if f['code'] == 'HOST_LOST']


def test_a_lost_peer_is_not_blamed_on_the_other_nodes_memlock():
    # n2 has a small memlock limit, n4 died: the pair n2<->n4 failed because n4 went away.
    nodes = {'n2': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('memlock_limited',)),
             'n4': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')}
    pair = {'server': 'n2', 'client': 'n4', 'rail': 0, 'memory': 'host', 'status': 'failed', 'verdict': 'failed',
            'bw_avg_gbps': None, 'failure': {'kind': 'node_lost', 'message': 'the client n4 returned no result'}, 'reasons': []}
    refused = dict(pair, server='n2', client='n4', rail=1, failure={'kind': 'mr_failed', 'message': "Couldn't allocate MR"})
    found = _diagnose.diagnose(nodes, {'pairs': [pair, refused]}, None, [], {'n2': ['validate', 'benchmark'], 'n4': ['validate']})
    ids = dict((f['code'], f['id']) for f in found if f['code'] in ('HOST_LOST', 'HOST_MEMLOCK_LIMITED'))
    by_rail = dict((f['subject'], f['explained_by']) for f in found if f['code'] == 'BENCH_PAIR_FAILED')
    assert by_rail['n2->n4 rail 0 host'] == ids['HOST_LOST'] and by_rail['n2->n4 rail 1 host'] == ids['HOST_MEMLOCK_LIMITED']


def test_gdr_not_used_although_every_node_is_ready():
    nodes = {'a': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr'), 'b': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')}
    collective = {'fleet': {'benchmark': 'all_reduce_perf', 'hosts': ['a', 'b'], 'verdict': {'status': 'low', 'ratio': 0.45},
                            'transport': {'net': 'IB', 'gdr': False, 'evidence': ['NET/IB : GPU Direct RDMA Disabled for HCA 0']}}}
    found = _diagnose.diagnose(nodes, None, collective)
    assert [f['code'] for f in found if f['code'] == 'COLLECTIVE_GDR_NOT_USED'] == ['COLLECTIVE_GDR_NOT_USED']
    # A node that is not ready explains it instead: no such finding then.
    nodes['b'] = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('acs_enabled',))
    assert not [f for f in _diagnose.diagnose(nodes, None, collective) if f['code'] == 'COLLECTIVE_GDR_NOT_USED']


def test_a_degraded_rail_does_not_make_the_storage_nic_a_far_rail():
    """8 x H100 with one rail trained at 2X (200 Gb/s, the BlueField-3 storage NIC's rate): the
    degraded port is the finding; the storage NIC, far from every GPU by design, is not."""
    healthy = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    degraded = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    port = degraded['ib']['devices'][0]['ports'][0]
    port.update(rate='200 Gb/sec (2X NDR)', rate_gbps=200.0, width='2X')
    storage = [d['name'] for d in degraded['ib']['devices'] if d['ports'][0]['link_layer'] == 'Ethernet']
    assert len(storage) == 1
    found = _diagnose.diagnose({'ok': healthy, 'deg': degraded})
    far = [(f['host'], f['subject']) for f in found if f['code'] == 'GPU_NIC_FAR']
    assert far == [], far
    assert [(f['host'], f['subject']) for f in found if f['code'] == 'IB_RATE_DEGRADED'] == [
        ('deg', '%s/1' % degraded['ib']['devices'][0]['name'])]


def test_no_rdma_device_and_dmabuf_say_which_path_nccl_takes():
    node = diagnosis_accuracy.node_facts('h200x2_no_rdma')
    (found,) = _diagnose.gdr_findings('h', node['gdr'], node['ib'])
    assert found['code'] == 'GDR_NO_RDMA_NIC' and found['severity'] == 'error'
    assert found['evidence'] == {'gpus': 2, 'rdma_devices': 0, 'nccl_path': 'socket'}
    assert _diagnose.gpu_net_path(node['gdr']) == 'socket'
    # An H100 node without nvidia_peermem, on the open kernel module: dma-buf stands in (a warning,
    # and the finding says so); with the proprietary module NCCL stages through host memory (an error).
    node = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('peermem_not_loaded',))
    (peer,) = [f for f in _diagnose.gdr_findings('h', node['gdr'], node['ib']) if f['code'] == 'GDR_PEERMEM_NOT_LOADED']
    assert peer['severity'] == 'warning' and peer['evidence']['nccl_path'] == 'dmabuf'
    assert 'NCCL will use GPUDirect RDMA through dma-buf' in peer['cause']
    node['gdr']['dmabuf']['possible'] = False
    (peer,) = [f for f in _diagnose.gdr_findings('h', node['gdr'], node['ib']) if f['code'] == 'GDR_PEERMEM_NOT_LOADED']
    assert peer['severity'] == 'error' and peer['evidence']['nccl_path'] == 'host_memory'
    assert 'copied through host memory' in peer['cause']


def test_gdr_not_ready_for_a_reason_no_rule_names_is_still_a_finding():
    node = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    node['gdr'].update(gdr_ready=False, reasons=['something new the facts found'])
    codes = [(f['code'], f['severity']) for f in _diagnose.gdr_findings('h', node['gdr'], node['ib'])]
    assert codes == [('GDR_NOT_READY', 'error')]


def _system_conf(value, path='/etc/systemd/system.conf'):
    soft = _host.parse_systemd_size(value)
    return {'value': value, 'soft': soft, 'hard': soft, 'file': path}


def test_memlock_of_services_follows_the_last_default_limit_memlock():
    drop_in = '/etc/systemd/system.conf.d/99-memlock.conf'

    def services(*entries):
        return [f for f in _diagnose.diagnose({'n': host_node(memlock=memlock('unlimited', systemd=entries))})
                if f['code'] == 'HOST_MEMLOCK_LIMITED']
    # A drop-in read after system.conf brings 8M back: services and slurmd's jobs get it.
    found = services(_system_conf('infinity'), _system_conf('8M', drop_in))
    assert len(found) == 1 and found[0]['subject'] == 'memlock (services)' and found[0]['severity'] == 'error'
    assert found[0]['evidence']['file'] == drop_in and found[0]['evidence']['soft'] == 8 << 20
    assert 'slurmd' in found[0]['cause'] and 'LimitMEMLOCK=' in found[0]['cause'] and 'below the 16 MiB' in found[0]['cause']
    # On the services, no benchmark test's path: ib_write_bw runs under the login limit (tests/unit/plugins/plugin_utils/test__links.py).
    assert found[0]['at'] == [['services', 'n']]
    # infinity read last wins; no DefaultLimitMEMLOCK at all is the compiled-in default: nothing said.
    assert services(_system_conf('8M'), _system_conf('infinity', drop_in)) == []
    assert services() == []
    assert services(_system_conf('64M')) == []
    # Not on a node without RDMA NIC.
    node = host_node(nics=(), memlock=memlock('unlimited', systemd=[_system_conf('8M')]))
    assert not [f for f in _diagnose.diagnose({'n': node}) if f['code'] == 'HOST_MEMLOCK_LIMITED']


def test_login_limit_names_only_the_systemd_entry_that_applies():
    # system.conf's infinity, overridden by a drop-in, raises nothing: the login finding does not cite it.
    found = [f for f in _diagnose.diagnose({'n': host_node(memlock=memlock(65536, systemd=[
        _system_conf('infinity'), _system_conf('8M', '/etc/systemd/system.conf.d/99-memlock.conf')]))})
        if f['code'] == 'HOST_MEMLOCK_LIMITED']
    assert sorted(f['subject'] for f in found) == ['memlock', 'memlock (services)']
    login = [f for f in found if f['subject'] == 'memlock'][0]
    assert login['evidence']['configured_unlimited_in'] == [] and 'configure unlimited' not in login['cause']


def _pair(server, client, memory, **more):
    pair = {'server': server, 'client': client, 'rail': 0, 'memory': memory, 'server_hca': 'mlx5_0', 'client_hca': 'mlx5_0',
            'status': 'ok', 'verdict': 'ok', 'bw_avg_gbps': 388.0, 'reasons': []}
    if memory == 'gpu':
        pair.update(server_gpu='GPU3', client_gpu='GPU3')
    pair.update(more)
    return pair


def test_a_pair_with_two_faulty_ends_is_linked_to_the_root_its_own_evidence_names():
    # The demo's mx-04 -> mx-02 on rail 0: mx-04 has no peer-memory client (its GPU memory cannot be registered),
    # mx-02's rail-0 port runs at 1X. Host memory ran, slow; GPU memory failed on mx-04's side.
    nodes = {'a': diagnosis_accuracy.node_facts('metax_c500_cx7', ('mm_kobj_not_exported',)),
             'b': diagnosis_accuracy.node_facts('metax_c500_cx7', ('rate_degraded_1x',)),
             'c': diagnosis_accuracy.node_facts('metax_c500_cx7')}
    degraded = [('b', 'mlx5_0', 100.0)]
    slow = _pair('a', 'b', 'host', verdict='low', bw_avg_gbps=97.0, bw_ratio=0.24, rail_nominal_gbps=400.0,
                 degraded_ports=[dict(zip(('host', 'hca', 'rate_gbps'), d)) for d in degraded], reasons=['97.0 Gb/s is 24 %'])
    failed = _pair('a', 'b', 'gpu', status='failed', verdict='failed', bw_avg_gbps=None,
                   failure={'kind': 'exchange_failed', 'message': "ethernet_read_keys: Couldn't read remote address"},
                   server_failure={'kind': 'mr_failed', 'message': "Couldn't allocate MR"},
                   reasons=['exchange_failed: ...', 'server side mr_failed: Couldn\'t allocate MR'])
    healthy = [_pair('c', 'b', 'gpu'), _pair('b', 'c', 'host', verdict='low', bw_avg_gbps=97.0)]
    found = _diagnose.diagnose(nodes, {'pairs': [slow, failed] + healthy})
    by_id = dict((f['id'], f) for f in found)
    roots = dict((f['subject'], by_id[f['explained_by']]) for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS and f['explained_by'])
    assert (roots['a->b rail 0 gpu']['code'], roots['a->b rail 0 gpu']['host']) == ('GDR_MM_KOBJ_NOT_EXPORTED', 'a')
    assert (roots['a->b rail 0 host']['code'], roots['a->b rail 0 host']['host']) == ('IB_RATE_DEGRADED', 'b')
    symptom = [f for f in found if f['subject'] == 'a->b rail 0 gpu'][0]
    assert symptom['code'] == 'BENCH_PAIR_FAILED' and symptom['evidence']['failed_side']['host'] == 'a'
    # Never left unexplained, never a device of its own.
    assert not [f for f in found if f['code'] == 'BENCH_DEVICE_UNEXPLAINED']
    assert not [f for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS and f['explained_by'] is None and f['severity'] != 'info']


def test_gpu_memory_refused_on_one_end_is_that_ends_peer_memory_chain_never_its_peers():
    # Both nodes lack the peer-memory client; this test failed on the client b only (its server a waited):
    # b's chain is the root, not a's, whatever their order.
    nodes = {'a': diagnosis_accuracy.node_facts('metax_c500_cx7', ('mm_kobj_not_exported',)),
             'b': diagnosis_accuracy.node_facts('metax_c500_cx7', ('mm_kobj_not_exported',))}
    failed = _pair('a', 'b', 'gpu', status='failed', verdict='failed', bw_avg_gbps=None,
                   failure={'kind': 'mr_failed', 'message': "Couldn't allocate MR"},
                   server_failure={'kind': 'timeout', 'message': 'killed after 120 s'})
    found = _diagnose.diagnose(nodes, {'pairs': [failed, _pair('a', 'b', 'host', verdict='low', bw_avg_gbps=97.0)]})
    by_id = dict((f['id'], f) for f in found)
    symptom = [f for f in found if f['subject'] == 'a->b rail 0 gpu'][0]
    assert (by_id[symptom['explained_by']]['code'], by_id[symptom['explained_by']]['host']) == ('GDR_MM_KOBJ_NOT_EXPORTED', 'b')


def test_pairs_that_never_reached_the_hardware_are_the_runs_failure_not_a_devices():
    # n2's beacon port was taken: its tests never ran, its peers lost it. No device verdict, no node blamed.
    nodes = dict((name, diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')) for name in ('n1', 'n2', 'n3', 'n4'))
    message = 'cannot listen on 127.0.1.2:18514 for the benchmark beacon: Address already in use'
    setup = {'kind': 'setup_failed', 'message': message}
    lost = {'kind': 'peer_lost', 'message': 'server n2 lost: no beacon of this run answered at 127.0.1.2:18514 for 60 s'}
    pairs = [_pair('n1', 'n3', 'host'), _pair('n3', 'n4', 'host'), _pair('n1', 'n4', 'host')]
    for memory in ('host', 'gpu'):
        pairs += [_pair('n2', peer, memory, status='failed', verdict='failed', bw_avg_gbps=None, failure=lost, server_failure=setup)
                  for peer in ('n1', 'n3')]
        pairs += [_pair(peer, 'n2', memory, status='failed', verdict='failed', bw_avg_gbps=None, failure=setup,
                        server_failure={'kind': 'peer_lost', 'message': 'client n2 lost'}) for peer in ('n4',)]
    found = _diagnose.diagnose(nodes, {'pairs': pairs})
    codes = [f['code'] for f in found if f['severity'] != 'info']
    assert codes == ['BENCH_RUN_BROKEN'], codes
    broken = found[[f['code'] for f in found].index('BENCH_RUN_BROKEN')]
    assert broken['host'] is None and broken['explained_by'] is None and broken['severity'] == 'error'
    assert broken['evidence']['failed_on'] == ['n2'] and broken['evidence']['nodes'] == ['n1', 'n2', 'n3', 'n4']
    assert broken['evidence']['tests'] == 6 and [c['tests'] for c in broken['evidence']['causes']] == [6]
    assert message in broken['cause'] and 'n2' in broken['cause'] and 'never reached the hardware' in broken['cause']


def test_malformed_records_fail_the_run_closed_and_name_the_node():
    # Records that could not be placed in a pair were dropped (_bench.record_problem) so that the others are judged;
    # the tests they held were not judged at all, which must fail the run, naming the node and the records.
    nodes = dict((name, diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')) for name in ('n1', 'n2'))
    bench = {'pairs': [_pair('n1', 'n2', 'host')],
             'records_malformed': {'n2': {'source': '/out/bench-records/n2.records.json.gz', 'dropped': 3,
                                          'records': ['record 0: server is missing, not a node name', 'record 4: memory is null, not host or gpu']}}}
    found = _diagnose.diagnose(nodes, bench)
    codes = [f['code'] for f in found if f['severity'] != 'info']
    assert codes == ['BENCH_RECORDS_MALFORMED'], codes
    bad = found[[f['code'] for f in found].index('BENCH_RECORDS_MALFORMED')]
    assert bad['severity'] == 'error' and bad['explained_by'] is None and bad['host'] is None
    assert bad['evidence']['node'] == 'n2' and bad['evidence']['dropped'] == 3
    assert 'n2' in bad['cause'] and 'server is missing' in bad['cause'] and 'n2.records.json.gz' in bad['cause']
    # Without malformed records, the same run has no such finding.
    assert 'BENCH_RECORDS_MALFORMED' not in [f['code'] for f in _diagnose.diagnose(nodes, {'pairs': [_pair('n1', 'n2', 'host')]})]
