# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: peermem_verdict
author: hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
short_description: The mm_kobj / peer-memory check on gdr_facts - is the OFED peer-memory path intact, and what fixes it
version_added: 0.1.0
description:
  - Reads C(gpu_fabric_gdr) (from C(hpc.gpu_fabric.gdr_facts)) and decides, for the GPU vendors on the
    node whose collective library needs a C(/sys/kernel/mm/memory_peers) client, one outcome.
  - C(ok) - every such vendor's peer-memory path is there (or no vendor needs one).
  - C(not_applicable) - no GPU, or no MLNX OFED (the inbox stack has no peer-memory clients).
  - C(module) - the peer-memory module is not loaded (role C(rdma_modules)).
  - C(rebuild) - the kernel exports C(mm_kobj) but OFED was built without C(HAVE_MM_KOBJ_EXPORTED);
    OFED must be rebuilt against this kernel.
  - C(kernel) - the running kernel does not export C(mm_kobj), so no OFED build can create memory_peers.
  - C(unknown) - the facts cannot tell (no export table and no kallsyms, or no OFED config header).
options:
  _input:
    description: C(ansible_facts.gpu_fabric_gdr).
    type: dict
    required: true
'''

EXAMPLES = r'''
- name: Decide
  ansible.builtin.set_fact:
    verdict: "{{ ansible_facts.gpu_fabric_gdr | hpc.gpu_fabric.peermem_verdict }}"
'''

RETURN = r'''
_value:
  description: C(outcome), C(vendors) (the vendors whose path is missing), C(message) and C(options) (what can be done).
  type: dict
'''

from ansible.errors import AnsibleFilterError


def _options(gdr):
    options = [
        'run a kernel that still exports mm_kobj (seed 000: RHEL 9.4 / OpenShift 4.18 did, RHEL 9.6 does not)',
        'install the GPU and NIC vendors\' fix for this kernel (an OFED or GPU driver release that '
        'registers its peer-memory client without memory_peers)',
    ]
    dmabuf = (gdr.get('dmabuf') or {})
    if dmabuf.get('possible'):
        options.insert(1, 'use the dma-buf path, possible on this node (kernel >= 5.12 and a dma-buf capable GPU driver)')
    else:
        options.insert(1, 'use the dma-buf path where the GPU driver supports it (%s here: %s)'
                       % ('not possible' if dmabuf.get('possible') is False else 'not known to work',
                          '; '.join(dmabuf.get('reasons') or []) or 'no reason recorded'))
    return options


def peermem_verdict(gdr):
    if not isinstance(gdr, dict):
        raise AnsibleFilterError('peermem_verdict expects gpu_fabric_gdr (a dict), got %s' % type(gdr).__name__)
    paths = (gdr.get('peer_memory') or {}).get('paths') or {}
    kernel = gdr.get('kernel') or {}
    ofed = gdr.get('ofed') or {}
    missing = sorted(vendor for vendor, path in paths.items() if not path.get('detected'))
    # dma-buf stands in for NVIDIA's and AMD's peer memory (see gdr_facts notes); MetaX has no such path.
    blocking = [v for v in missing if not (v in ('nvidia', 'amd') and (gdr.get('dmabuf') or {}).get('possible'))]
    verdict = {'outcome': 'ok', 'vendors': blocking, 'message': '', 'options': [],
               'kernel_release': kernel.get('release'), 'ofed_version': ofed.get('version')}
    if not paths:
        verdict.update(outcome='not_applicable', message='no GPU of a supported vendor on this node')
        return verdict
    if not blocking:
        verdict['message'] = 'peer-memory path present for %s' % ', '.join(sorted(paths))
        return verdict
    if ofed.get('version') is None and ofed.get('config_header') is None:
        verdict.update(outcome='not_applicable',
                       message='no MLNX OFED: the inbox RDMA stack has no peer-memory clients; use the dma-buf path')
        return verdict
    unloaded = [v for v in blocking if not paths[v].get('module_loaded')]
    if unloaded:
        verdict.update(outcome='module', vendors=unloaded, message='peer-memory module not loaded for %s: %s (role rdma_modules)'
                       % (', '.join(unloaded), ', '.join(m for v in unloaded for m in paths[v].get('modules', [])[:1])))
        return verdict
    chain = ' -> '.join(paths[blocking[0]].get('chain') or [])
    if kernel.get('mm_kobj_exported') is False:
        verdict.update(outcome='kernel', options=_options(gdr),
                       message='kernel %s does not export mm_kobj, so no OFED build can create memory_peers: %s'
                       % (kernel.get('release'), chain))
    elif kernel.get('mm_kobj_exported') is True and ofed.get('have_mm_kobj_exported') is False:
        verdict.update(outcome='rebuild',
                       options=['rebuild MLNX OFED (mlnx-ofa_kernel) against kernel %s and reload it' % kernel.get('release')],
                       message='OFED %s was built without HAVE_MM_KOBJ_EXPORTED although kernel %s exports mm_kobj: '
                               'rebuild OFED against this kernel' % (ofed.get('version'), kernel.get('release')))
    else:
        verdict.update(outcome='unknown', message=chain or 'peer-memory client missing for %s' % ', '.join(blocking))
    return verdict


class FilterModule(object):

    def filters(self):
        return {'peermem_verdict': peermem_verdict}
