# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One peer-memory decision (_gdr.peer_verdict): the facts' chain and reasons, the diagnosis'
GDR_* finding and the peermem_verdict filter say the same root, in every combination."""

from __future__ import annotations

import itertools

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.filter.peermem_verdict import peermem_verdict
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose

MODULE = {'nvidia': 'nvidia_peermem', 'metax': 'metax', 'amd': 'amdgpu'}
COMBINATIONS = list(itertools.product(('nvidia', 'metax', 'amd'), (True, False), (True, False, None), (True, False, None),
                                      (True, False), (True, False)))


def node(vendor, loaded, exported, flag, registered, ofed=True):
    spec = _gdr.PEER_PATHS[vendor]
    # NCCL accepts /sys/module/nvidia_peermem/version alone; the others need the memory_peers client.
    detected = registered or (loaded and bool(spec['module_version_files']))
    path = {'modules': list(spec['modules']), 'module_loaded': MODULE[vendor] if loaded else None,
            'client': spec['clients'][0], 'client_version': '1.0' if registered else None, 'library': spec['library'],
            'detected': detected, 'evidence': 'x' if detected else None}
    kernel = {'release': '5.14.0-570.el9_6.x86_64', 'mm_kobj_exported': exported, 'mm_kobj_source': '/proc/kallsyms'}
    ofed = ({'version': 'MLNX_OFED_LINUX-24.10-1.1.4.0', 'version_source': '/usr/bin/ofed_info',
             'config_header': '/usr/src/ofa_kernel/default/compat/config.h', 'have_mm_kobj_exported': flag} if ofed else
            {'version': None, 'version_source': None, 'config_header': None, 'have_mm_kobj_exported': None})
    gpus = [{'name': 'GPU0', 'pci_address': '0000:1a:00.0', 'vendor': vendor, 'nearest_nic': 'mlx5_0'}]
    nics = [{'name': 'mlx5_0', 'pci_address': '0000:1b:00.0'}]
    peer = {'memory_peers_present': True, 'clients': {}, 'paths': {vendor: path}}
    dmabuf = {'possible': False, 'reasons': ['x']}
    ready, reasons, notes = _gdr.assess(gpus, nics, [], peer, kernel, ofed, dmabuf)
    return {'gpus': gpus, 'nics': nics, 'topology': [], 'peer_memory': peer, 'kernel': kernel, 'ofed': ofed,
            'dmabuf': dmabuf, 'gdr_ready': ready, 'reasons': reasons, 'notes': notes}


def ib():
    return {'devices': [{'name': 'mlx5_0', 'ports': [{'port': 1, 'state': 'ACTIVE', 'rate_gbps': 400, 'link_layer': 'InfiniBand'}]}]}


@pytest.mark.parametrize('vendor, loaded, exported, flag, registered, ofed', COMBINATIONS)
def test_facts_finding_and_filter_agree(vendor, loaded, exported, flag, registered, ofed):
    gdr = node(vendor, loaded, exported, flag, registered, ofed)
    path = gdr['peer_memory']['paths'][vendor]
    verdict = _gdr.peer_verdict(vendor, path, gdr['kernel'], gdr['ofed'], gdr['dmabuf'])
    found = [f for f in _diagnose.gdr_findings('n1', gdr, ib()) if f['subject'] == vendor]
    answer = peermem_verdict(gdr)
    if verdict is None:
        assert path['detected'] and found == [] and answer['outcome'] == 'ok' and gdr['reasons'] == []
        return
    chain = ' -> '.join(verdict['chain'])
    assert path['chain'] == verdict['chain']
    assert gdr['reasons'] == ['%s GPUs: %s' % (vendor, chain)]
    (finding,) = found
    # The node says what blocks (a kind, no finding code); the controller's registry names the code.
    assert verdict['blocker'] in _gdr.PEER_OUTCOMES and 'code' not in verdict
    code = _findings.PEER_BLOCKER_CODES[verdict['blocker']]
    assert finding['code'] == code and finding['cause'].startswith(chain + '; NCCL will use')
    assert (answer['outcome'], answer['code'], answer['chain'], answer['vendors']) == (verdict['outcome'], code,
                                                                                       verdict['chain'], [vendor])


def test_every_blocker_kind_has_its_code_in_the_same_order():
    assert list(_findings.PEER_BLOCKER_CODES) == list(_gdr.PEER_OUTCOMES)
    codes = ['GDR_MM_KOBJ_NOT_EXPORTED', 'GDR_OFED_STALE_BUILD', 'GDR_PEERMEM_NOT_LOADED', 'GDR_MEMORY_PEERS_MISSING']
    assert list(_findings.PEER_BLOCKER_CODES.values()) == codes


@pytest.mark.parametrize('flag', (True, False, None))
def test_a_kernel_without_mm_kobj_is_the_root_even_with_the_module_unloaded(flag):
    gdr = node('metax', False, False, flag, False)
    (finding,) = [f for f in _diagnose.gdr_findings('n1', gdr, ib()) if f['subject'] == 'metax']
    assert finding['code'] == 'GDR_MM_KOBJ_NOT_EXPORTED' and 'metax is not loaded either' in finding['cause']
    assert finding['remedy'].startswith('a kernel that exports mm_kobj')
    assert peermem_verdict(gdr)['outcome'] == 'kernel'


def test_nccl_needs_only_the_module_so_it_is_the_root_there():
    # /sys/module/nvidia_peermem/version is enough for NCCL (src/transport/net_ib/gdr.cc): loading it
    # brings GPUDirect RDMA back whatever the kernel exports.
    gdr = node('nvidia', False, False, False, False)
    (finding,) = [f for f in _diagnose.gdr_findings('n1', gdr, ib()) if f['subject'] == 'nvidia']
    assert finding['code'] == 'GDR_PEERMEM_NOT_LOADED' and peermem_verdict(gdr)['outcome'] == 'module'


def test_without_ofed_the_inbox_stack_is_the_root():
    gdr = node('nvidia', False, None, None, False, ofed=False)
    (finding,) = [f for f in _diagnose.gdr_findings('n1', gdr, ib()) if f['subject'] == 'nvidia']
    assert finding['cause'].startswith('no MLNX OFED is installed') and 'install MLNX OFED' in finding['remedy']
    assert peermem_verdict(gdr)['outcome'] == 'not_applicable'
