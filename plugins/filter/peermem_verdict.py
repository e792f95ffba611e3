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
  description: C(outcome), C(vendors) (the vendors whose path is missing), C(message), C(options) (what can be done),
    C(code) (the diagnosis' finding code for the same root, null when C(ok)) and C(chain) (its causes, deepest first).
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings


def _options(gdr):
    options = [
        'run a kernel that still exports mm_kobj (RHEL 9.4 and OpenShift 4.18 do, RHEL 9.6 and OpenShift 4.19 do not)',
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
    # The decision is gdr_facts' own (module_utils/_gdr.py peer_verdict): the same root, in the
    # same order, as the facts' reasons and the diagnosis' GDR_* finding.
    verdicts = dict((vendor, _gdr.peer_verdict(vendor, path, kernel, ofed, gdr.get('dmabuf'))) for vendor, path in paths.items())
    blocking = sorted(vendor for vendor, found in verdicts.items() if found and found['blocking'])
    verdict = {'outcome': 'ok', 'vendors': blocking, 'message': '', 'options': [], 'code': None, 'chain': [],
               'kernel_release': kernel.get('release'), 'ofed_version': ofed.get('version')}
    if not paths:
        verdict.update(outcome='not_applicable', message='no GPU of a supported vendor on this node')
        return verdict
    if not blocking:
        verdict['message'] = 'peer-memory path present for %s' % ', '.join(sorted(paths))
        return verdict
    # Several vendors on one node: the deepest root first. The node says what blocks; the
    # registry names its finding code (the diagnosis' GDR_* finding of the same root).
    order = list(_gdr.PEER_OUTCOMES)
    first = min(blocking, key=lambda vendor: (verdicts[vendor]['outcome'] != 'not_applicable', order.index(verdicts[vendor]['blocker'])))
    root = verdicts[first]
    vendors = [v for v in blocking if (verdicts[v]['blocker'], verdicts[v]['outcome']) == (root['blocker'], root['outcome'])]
    chain = ' -> '.join(root['chain'])
    verdict.update(outcome=root['outcome'], vendors=vendors, code=_findings.PEER_BLOCKER_CODES[root['blocker']], chain=root['chain'])
    if root['outcome'] == 'not_applicable':
        verdict['message'] = 'no MLNX OFED: the inbox RDMA stack has no peer-memory clients; use the dma-buf path'
    elif root['outcome'] == 'module':
        verdict['message'] = 'peer-memory module not loaded for %s: %s (role rdma_modules)' % (
            ', '.join(vendors), ', '.join(m for v in vendors for m in paths[v].get('modules', [])[:1]))
    elif root['outcome'] == 'kernel':
        verdict.update(options=_options(gdr), message='kernel %s does not export mm_kobj, so no OFED build can create memory_peers: %s'
                       % (kernel.get('release'), chain))
    elif root['outcome'] == 'rebuild':
        verdict.update(options=['rebuild MLNX OFED (mlnx-ofa_kernel) against kernel %s and reload it' % kernel.get('release')],
                       message='OFED %s was built without HAVE_MM_KOBJ_EXPORTED although kernel %s exports mm_kobj: '
                               'rebuild OFED against this kernel' % (ofed.get('version'), kernel.get('release')))
    else:
        verdict['message'] = chain
    return verdict


class FilterModule(object):

    def filters(self):
        return {'peermem_verdict': peermem_verdict}
