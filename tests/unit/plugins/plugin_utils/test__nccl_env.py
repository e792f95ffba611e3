# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NCCL settings recommended from facts that the real readers produce on simulated nodes.

Each node is a tests/sim profile (with faults from the catalog where a case needs one)
rendered into a snapshot root, read with the readers of ib_link_facts and gdr_facts.
"""

from __future__ import annotations

import copy

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter.nccl_settings import nccl_settings
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._nccl_env import recommend
from tests.sim import node_facts

H100_HCA = '=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1'
NO_ROUTE = 'NCCL_SOCKET_IFNAME not set: gpu_fabric_gdr.host.default_route_interface is not in the facts'


def node(tmp_path, profile_name, *fault_names, **changes):
    """(gpu_fabric_ib, gpu_fabric_gdr) of a simulated node, as the readers of the facts modules
    return them: without ``gdr.host``, which gdr_facts adds from its own reader; a test that
    needs it says so."""
    facts = node_facts.read(tmp_path, profile_name, fault_names, changes, host=False)
    return facts['ib'], facts['gdr']


@pytest.mark.parametrize('profile, iface', [('nvidia_h100_8x_ndr', 'enp209s0f0np0'), ('amd_mi300x_roce', 'eno8303')])
def test_default_route_from_the_host_reader(tmp_path, profile, iface):
    # gdr_facts' host layer (module_utils/_host.py) reads /proc/net/route below the root. The H100's
    # default route leaves through the BlueField-3 front-end port: sockets there, RDMA on the rails.
    facts = node_facts.read(tmp_path, profile)
    result = recommend(facts['ib'], facts['gdr'])
    assert result['settings']['NCCL_SOCKET_IFNAME'] == '=' + iface
    assert result['reasons']['NCCL_SOCKET_IFNAME'].startswith(
        'the default route leaves through %s (gpu_fabric_gdr.host.default_route_interface)' % iface)
    assert not [n for n in result['notes'] if n.startswith('NCCL_SOCKET_IFNAME')]


def note(result, start):
    found = [n for n in result['notes'] if n.startswith(start)]
    assert len(found) == 1, result['notes']
    return found[0]


def test_h100_infiniband_leaves_out_the_storage_nic(tmp_path):
    result = recommend(*node(tmp_path, 'nvidia_h100_8x_ndr'))
    # IB link layer: no GID index. The BlueField-3 storage NIC (RoCE, 200 Gb/s, NODE/SYS from
    # every GPU) is not in the list, and neither would it mix RoCE into an InfiniBand list.
    assert result['settings'] == {'NCCL_IB_HCA': H100_HCA, 'NCCL_NET_GDR_LEVEL': 'PIX'}
    assert sorted(result['reasons']) == ['NCCL_IB_HCA', 'NCCL_NET_GDR_LEVEL']
    hca = result['reasons']['NCCL_IB_HCA']
    # Its role is module_utils/_rails.py's: another model than the rails, near no GPU (no host facts
    # here, so no default route to call it the management NIC).
    assert ('Left out: mlx5_8:1 (Ethernet 200 Gb/s, a storage NIC, not a compute rail: the nearest NIC of no GPU, of '
            'another model (MT41692 MT_0000000884 Ethernet) than the compute rails; the closest GPU is NODE away)') in hca
    assert 'GPU0: mlx5_0 PIX' in hca and 'GPU7: mlx5_7 PIX' in hca
    level = result['reasons']['NCCL_NET_GDR_LEVEL']
    assert 'gdr_ready' in level and 'GPU3-mlx5_3 PIX' in level and 'at most NCCL_NET_GDR_LEVEL' in level
    assert result['notes'] == [note(result, NO_ROUTE)]


def test_mi300x_roce_gets_the_v2_ipv4_gid_and_the_rccl_file(tmp_path):
    result = recommend(*node(tmp_path, 'amd_mi300x_roce'))
    assert result['settings'] == {'NCCL_IB_HCA': H100_HCA, 'NCCL_IB_GID_INDEX': '3', 'NCCL_NET_GDR_LEVEL': 'PIX'}
    gid = result['reasons']['NCCL_IB_GID_INDEX']
    assert gid.startswith('GID 3 is the RoCE v2 GID with an IPv4 address on all 8 RoCE port(s)')
    assert 'mlx5_0:1 192.168.10.11' in gid and 'mlx5_7:1 192.168.17.11' in gid
    assert '/etc/rccl.conf' in note(result, 'AMD GPUs: RCCL')


def test_homelab_far_gpu_is_not_forced_to_gdr(tmp_path):
    # Seed 002: one 40 Gb/s ConnectX-4, the GPU on the other socket (SYS), inbox stack.
    result = recommend(*node(tmp_path, 'homelab_cx4'))
    assert result['settings'] == {'NCCL_IB_HCA': '=mlx5_0:1'}
    why = note(result, 'NCCL_NET_GDR_LEVEL not set: GPUDirect RDMA is not ready')
    assert 'nearest RDMA NIC mlx5_0 is SYS away' in why
    assert 'Fix the topology: a GPU with no NIC within PXB' in why
    # The reason is the distance; dma-buf stands in for the missing nvidia_peermem here.
    assert 'ofed_peermem' not in why and 'pcie_acs' not in why


def test_no_rdma_vm_recommends_nothing_for_ib(tmp_path):
    ib, gdr = node(tmp_path, 'no_rdma_vm')
    result = recommend(ib, gdr)
    assert result['settings'] == {} and result['reasons'] == {}
    assert 'NCCL_IB_DISABLE=1 would only skip the probe' in note(result, 'no RDMA device in gpu_fabric_ib')
    # The socket transport is all such a node has: the default route's interface still counts.
    gdr['host'] = {'default_route_interface': 'eth0'}
    result = recommend(ib, gdr)
    assert result['settings'] == {'NCCL_SOCKET_IFNAME': '=eth0'}
    assert 'the default route leaves through eth0' in result['reasons']['NCCL_SOCKET_IFNAME']
    assert not [n for n in result['notes'] if n.startswith('NCCL_SOCKET_IFNAME')]


@pytest.mark.parametrize('host', [None, {}, {'default_route_interface': None}], ids=['absent', 'empty', 'no-route'])
def test_socket_ifname_needs_the_default_route(tmp_path, host):
    ib, gdr = node(tmp_path, 'nvidia_h100_8x_ndr')
    if host is not None:
        gdr['host'] = host
    result = recommend(ib, gdr)
    assert 'NCCL_SOCKET_IFNAME' not in result['settings']
    note(result, NO_ROUTE)
    gdr['host'] = {'default_route_interface': 'bond0'}
    assert recommend(ib, gdr)['settings']['NCCL_SOCKET_IFNAME'] == '=bond0'


def test_port_down_is_left_out_and_its_gpu_reaches_the_next_nic(tmp_path):
    result = recommend(*node(tmp_path, 'nvidia_h100_8x_ndr', 'port_down'))
    # mlx5_0 is down: GPU0's nearest ACTIVE NIC is mlx5_1 under the same first-level switch (PXB).
    assert result['settings'] == {'NCCL_IB_HCA': H100_HCA.replace('mlx5_0:1,', ''), 'NCCL_NET_GDR_LEVEL': 'PXB'}
    assert 'mlx5_0:1 (state DOWN, physical state Disabled)' in result['reasons']['NCCL_IB_HCA']
    assert 'GPU0-mlx5_1 PXB' in result['reasons']['NCCL_NET_GDR_LEVEL']


def test_degraded_compute_nic_stays_a_compute_nic(tmp_path):
    # 100 Gb/s after training at 1X, but still the NIC under GPU0's switch: the rate alone does
    # not make a storage NIC (the diagnosis reports the degraded link).
    result = recommend(*node(tmp_path, 'nvidia_h100_8x_ndr', 'rate_degraded_1x'))
    assert result['settings']['NCCL_IB_HCA'] == H100_HCA


def test_nic_moved_to_the_other_socket_is_kept_at_full_rate(tmp_path):
    # cross_numa re-seats mlx5_0 on the other socket: the nearest NIC of no GPU now, but as fast
    # as the others, so still a compute NIC; GPU0 now reaches mlx5_1 at PXB.
    result = recommend(*node(tmp_path, 'nvidia_h100_8x_ndr', 'cross_numa'))
    assert result['settings'] == {'NCCL_IB_HCA': H100_HCA, 'NCCL_NET_GDR_LEVEL': 'PXB'}


@pytest.mark.parametrize('profile, fault_names, changes, fix', [
    ('nvidia_h100_8x_ndr', ('peermem_not_loaded',), {'nvidia_driver': {'open': False}}, 'role ofed_peermem'),
    ('metax_c500_cx7', ('mm_kobj_not_exported',), {}, 'role ofed_peermem'),
    ('nvidia_h100_8x_ndr', ('acs_enabled',), {}, 'role pcie_acs'),
], ids=['nvidia-peermem-unloaded', 'seed000-mm-kobj', 'acs-redirect'])
def test_gdr_not_ready_leaves_the_level_unset(tmp_path, profile, fault_names, changes, fix):
    ib, gdr = node(tmp_path, profile, *fault_names, **changes)
    assert gdr['gdr_ready'] is False
    result = recommend(ib, gdr)
    assert 'NCCL_NET_GDR_LEVEL' not in result['settings']
    why = note(result, 'NCCL_NET_GDR_LEVEL not set: GPUDirect RDMA is not ready')
    assert fix in why and gdr['reasons'][0] in why
    assert 'NCCL_IB_HCA' in result['settings']


def test_seed000_metax_node(tmp_path):
    # The seed's own choice, IB_PORT=mlx5_0,mlx5_1: the 200 Gb/s BlueField-3 is NODE from every GPU.
    result = recommend(*node(tmp_path, 'metax_c500_cx7'))
    assert result['settings'] == {'NCCL_IB_HCA': '=mlx5_0:1,mlx5_1:1', 'NCCL_NET_GDR_LEVEL': 'PXB'}
    assert 'Left out: mlx5_2:1 (Ethernet 200 Gb/s' in result['reasons']['NCCL_IB_HCA']
    assert 'MCCL_IB_HCA' in note(result, 'MetaX GPUs: MCCL reads MCCL_*')


def test_roce_port_without_v2_gid_leaves_the_index_unset(tmp_path):
    result = recommend(*node(tmp_path, 'amd_mi300x_roce', 'roce_no_v2_gid'))
    assert 'NCCL_IB_GID_INDEX' not in result['settings']
    assert result['settings']['NCCL_IB_HCA'] == H100_HCA
    note(result, 'NCCL_IB_GID_INDEX not set: RoCE port(s) mlx5_0:1 have no RoCE v2 GID with an IPv4 address')


def test_roce_v2_gid_at_different_indexes_leaves_the_index_unset(tmp_path):
    ib, gdr = node(tmp_path, 'amd_mi300x_roce')
    # A second address on mlx5_1's netdev first: its fabric address moves to GID 5.
    gids = ib['devices'][1]['ports'][0]['gids']
    assert ib['devices'][1]['name'] == 'mlx5_1' and gids[3]['index'] == 3
    gids[3]['index'] = 5
    result = recommend(ib, gdr)
    assert 'NCCL_IB_GID_INDEX' not in result['settings']
    assert 'mlx5_0:1: 3, mlx5_1:1: 5, mlx5_2:1: 3' in note(result, 'NCCL_IB_GID_INDEX not set: the RoCE v2 IPv4 GID is at different')


def test_node_distance_is_phb_to_nccl(tmp_path):
    # NCCL has no NODE path type (src/graph/topo.cc topoPathTypeStr): it would ignore the name.
    ib, gdr = node(tmp_path, 'homelab_cx4')
    gdr['topology'][0]['distance'] = 'NODE'
    gdr['gdr_ready'], gdr['reasons'] = True, []
    result = recommend(ib, gdr)
    assert result['settings']['NCCL_NET_GDR_LEVEL'] == 'PHB'
    assert 'NCCL names NODE PHB' in result['reasons']['NCCL_NET_GDR_LEVEL']


def test_exact_names_keep_mlx5_1_from_matching_mlx5_10(tmp_path):
    ib, gdr = node(tmp_path, 'homelab_cx4')
    second = copy.deepcopy(ib['devices'][0])
    second['name'] = 'mlx5_10'
    ib['devices'].append(second)
    ib['devices'][0]['name'] = 'mlx5_1'
    # No GPU facts: every ACTIVE port, in natural order (mlx5_1 before mlx5_10).
    result = nccl_settings(ib)
    assert result['settings'] == {'NCCL_IB_HCA': '=mlx5_1:1,mlx5_10:1'}
    note(result, 'no GPU in gpu_fabric_gdr')
    note(result, 'NCCL_NET_GDR_LEVEL not set: no gpu_fabric_gdr facts')


def test_filter_without_gdr_facts_warns_of_mixed_link_layers(tmp_path):
    ib, _gdr = node(tmp_path, 'nvidia_h100_8x_ndr')
    result = nccl_settings(ib)
    # Without topology the storage NIC cannot be told apart: it is listed, with its RoCE GID.
    assert result['settings'] == {'NCCL_IB_HCA': H100_HCA + ',mlx5_8:1', 'NCCL_IB_GID_INDEX': '3'}
    assert '(Ethernet, InfiniBand)' in note(result, 'NCCL_IB_HCA mixes link layers')


def test_filter_rejects_what_is_not_facts():
    with pytest.raises(AnsibleFilterError, match='expects gpu_fabric_ib'):
        nccl_settings(['mlx5_0'])
    with pytest.raises(AnsibleFilterError, match='gdr must be gpu_fabric_gdr'):
        nccl_settings({'devices': []}, 'gdr')
