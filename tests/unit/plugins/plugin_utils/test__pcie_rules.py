# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""PCIE_LINK_DEGRADED and HOST_IOMMU_TRANSLATED (plugin_utils/diagnosis/_pcie_rules.py): one finding per fault,
on the places whose traffic crosses it, over simulated nodes read by gdr_facts' own readers."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _pcie_rules
from tests.bench import diagnosis_accuracy

H100 = 'nvidia_h100_8x_ndr'


@pytest.fixture(scope='module')
def healthy():
    return diagnosis_accuracy.node_facts(H100)


def _codes(found):
    return [f['code'] for f in found if f['severity'] != 'info']


def test_healthy_nodes_have_none(healthy):
    assert _pcie_rules.pcie_findings('n', healthy['gdr'], healthy['ib']) == []
    assert _pcie_rules.iommu_findings('n', healthy['gdr']) == []
    for profile in ('homelab_cx4', 'amd_mi300x_roce', 'h200x2_no_rdma'):
        node = diagnosis_accuracy.node_facts(profile)
        assert _pcie_rules.pcie_findings('n', node['gdr'], node['ib']) + _pcie_rules.iommu_findings('n', node['gdr']) == []


def test_hca_link_sits_on_the_hca():
    node = diagnosis_accuracy.node_facts(H100, ('pcie_link_degraded',))
    [found] = _pcie_rules.pcie_findings('n1', node['gdr'], node['ib'])
    assert (found['code'], found['severity'], found['layer'], found['subject']) == \
        ('PCIE_LINK_DEGRADED', 'error', 'ib_gpu', 'PCIe 0000:1b:00.0 (mlx5_0)')
    assert found['at'] == [['hca', 'n1', 'mlx5_0']]
    evidence = found['evidence']
    assert (evidence['upstream'], evidence['width'], evidence['max_width'], evidence['upstream_max_width']) == ('0000:19:01.0', 8, 16, 16)
    assert (evidence['gbps'], evidence['capable_gbps'], evidence['port_rate_gbps'], evidence['below_port_rate']) == \
        (252.056, 504.112, 400.0, True)
    assert '8 of 16 lanes' in found['cause'] and 'below the 400.0 Gb/s' in found['cause']
    assert '/sys/bus/pci/devices/0000:1b:00.0' in found['remedy']


def test_gpu_link_sits_on_the_gpu_and_its_paths():
    node = diagnosis_accuracy.node_facts(H100, ('gpu_link_narrow',))
    [found] = _pcie_rules.pcie_findings('n1', node['gdr'], node['ib'])
    assert found['at'][0] == ['gpu', 'n1', 'GPU0']
    assert sorted(p[3] for p in found['at'][1:]) == sorted('mlx5_%d' % i for i in range(9))
    assert all(p[:3] == ['gpu_nic', 'n1', 'GPU0'] for p in found['at'][1:])
    # Its nearest NIC's rate is the one GPU memory tests through it need.
    assert found['evidence']['port_rate_gbps'] == 400.0 and found['severity'] == 'error'


def test_bridge_link_sits_on_what_crosses_it():
    node = diagnosis_accuracy.node_facts(H100, ('pcie_bridge_slow',))
    [found] = _pcie_rules.pcie_findings('n1', node['gdr'], node['ib'])
    at = [tuple(p) for p in found['at']]
    assert found['subject'] == 'PCIe 0000:16:00.0 (bridge)' and found['evidence']['speed_gts'] == 16.0
    # Host memory through its HCAs crosses it; not every test through the HCA or GPU ('hca'/'gpu' places).
    assert set(p for p in at if p[0] != 'gpu_nic') == set([('hca_host', 'n1', 'mlx5_0'), ('hca_host', 'n1', 'mlx5_1')])
    pairs = set(p[2:] for p in at if p[0] == 'gpu_nic')
    # One end below the switch, the other not: the traffic crosses the slow link ...
    assert ('GPU0', 'mlx5_4') in pairs and ('GPU5', 'mlx5_1') in pairs
    # ... both below it (the switch turns it round) or both elsewhere: it does not.
    assert ('GPU0', 'mlx5_0') not in pairs and ('GPU1', 'mlx5_0') not in pairs and ('GPU4', 'mlx5_4') not in pairs


def _pair(rail, memory, hca, gpu=None):
    entry = {'server': 'a', 'client': 'n1', 'rail': rail, 'memory': memory, 'status': 'ok', 'verdict': 'low',
             'server_hca': hca, 'client_hca': hca, 'bw_avg_gbps': 200.0, 'port_rate_gbps': 400.0, 'reasons': ['slow']}
    if memory == 'gpu':
        entry.update(server_gpu=gpu, client_gpu=gpu, gpu_distance='PIX', gpu_vs_host=0.5)
    return entry


def test_a_slow_bridge_explains_host_memory_and_gpu_paths_across_it_only(healthy):
    # The switch above GPU0, GPU1, mlx5_0 and mlx5_1 trained 16 of 32 GT/s. Host memory through mlx5_0
    # crosses its up-link; GPU0<->mlx5_0 turns round inside the switch and never does; GPU5<->mlx5_1
    # (one end below, the other not) does.
    node = diagnosis_accuracy.node_facts(H100, ('pcie_bridge_slow',))
    nodes = {'a': copy.deepcopy(healthy), 'n1': node, 'c': copy.deepcopy(healthy)}
    bench = {'pairs': [_pair(0, 'host', 'mlx5_0'), _pair(0, 'gpu', 'mlx5_0', 'GPU0'), _pair(1, 'gpu', 'mlx5_1', 'GPU5')],
             'thresholds': {}}
    found = _diagnose.diagnose(nodes, bench)
    [root] = [f for f in found if f['code'] == 'PCIE_LINK_DEGRADED']
    by = dict((f['subject'], f) for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS)
    assert ['hca_host', 'n1', 'mlx5_0'] in by['a->n1 rail 0 host']['path']
    assert ['hca_host', 'n1', 'mlx5_0'] not in by['a->n1 rail 0 gpu']['path']
    assert by['a->n1 rail 0 host']['explained_by'] == root['id']
    assert by['a->n1 rail 0 gpu']['explained_by'] != root['id']
    assert by['a->n1 rail 1 gpu']['explained_by'] == root['id']


def test_degraded_above_the_port_rate_is_a_warning(healthy):
    gdr = copy.deepcopy(healthy['gdr'])
    link = [l for l in gdr['pcie_links'] if l['device'] == 'mlx5_0'][0]
    # Gen5 x16 trained x12: 378 Gb/s ... below 400: error; a 200 Gb/s port would still be fed: warning.
    link.update(width=12, degraded=True, width_degraded=True, gbps=378.084)
    ib = copy.deepcopy(healthy['ib'])
    assert _pcie_rules.pcie_findings('n', gdr, ib)[0]['severity'] == 'error'
    ib['devices'][0]['ports'][0]['rate_gbps'] = 200.0
    [found] = _pcie_rules.pcie_findings('n', gdr, ib)
    assert (found['severity'], found['evidence']['below_port_rate'], found['evidence']['port_rate_gbps']) == ('warning', False, 200.0)
    # No HCA rate known (no ib facts): not a warning by default.
    assert _pcie_rules.pcie_findings('n', gdr, None)[0]['severity'] == 'error'


def test_idle_gpu_speed_and_unjudged_links_give_nothing(healthy):
    gdr = copy.deepcopy(healthy['gdr'])
    gpu = [l for l in gdr['pcie_links'] if l['device'] == 'GPU3'][0]
    gpu.update(speed_gts=2.5, gbps=32.0, degraded=False, gpu_idle_speed=True, speed_degraded=False)
    gdr['pcie_links'][0].update(degraded=None, reason='the link reads width 0 (down or not trained)')
    assert _pcie_rules.pcie_findings('n', gdr, healthy['ib']) == []


def test_iommu_translated_sits_on_the_node():
    node = diagnosis_accuracy.node_facts(H100, ('iommu_translated',))
    [found] = _pcie_rules.iommu_findings('n1', node['gdr'])
    assert (found['code'], found['severity'], found['layer'], found['at']) == ('HOST_IOMMU_TRANSLATED', 'warning', 'host', [['node', 'n1']])
    assert found['evidence']['types'] == dict.fromkeys(['GPU%d' % i for i in range(8)] + ['mlx5_%d' % i for i in range(9)], 'DMA-FQ')
    assert found['evidence']['cmdline'] == {'intel_iommu': 'on'}
    assert 'iommu=pt' in found['remedy'] and 'intel_iommu=on' in found['cause']
    # An HCA-only node: the IOMMU costs no GPUDirect RDMA there.
    gdr = dict(node['gdr'], gpus=[])
    assert _pcie_rules.iommu_findings('n1', gdr) == []


def test_diagnose_roots():
    nodes = {'peer': diagnosis_accuracy.node_facts(H100),
             'node': diagnosis_accuracy.node_facts(H100, ('pcie_link_degraded', 'iommu_translated'))}
    found = _diagnose.diagnose(nodes)
    roots = sorted((f['code'], f['host']) for f in found if f['explained_by'] is None and f['severity'] != 'info')
    assert ('PCIE_LINK_DEGRADED', 'node') in roots and ('HOST_IOMMU_TRANSLATED', 'node') in roots
    assert not [f for f in found if f['host'] == 'peer' and f['severity'] != 'info']
