# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter.peermem_verdict import peermem_verdict
from tests.sim import node_facts


def gdr_of(tmp_path, profile_name, *fault_names, **changes):
    return node_facts.read(tmp_path, profile_name, fault_names, changes, host=False)['gdr']


@pytest.mark.parametrize('profile, fault_names, changes, outcome, vendors', [
    ('metax_c500_cx7', (), {}, 'ok', []),
    ('metax_c500_cx7', ('mm_kobj_not_exported',), {}, 'kernel', ['metax']),
    ('metax_c500_cx7', ('ofed_stale_build',), {}, 'rebuild', ['metax']),
    ('nvidia_h100_8x_ndr', ('mm_kobj_not_exported',), {}, 'ok', []),          # nvidia_peermem is enough for NCCL
    ('nvidia_h100_8x_ndr', ('peermem_not_loaded',), {'nvidia_driver': {'open': False}}, 'module', ['nvidia']),
    ('nvidia_h100_8x_ndr', ('peermem_not_loaded',), {}, 'ok', []),             # dma-buf stands in
    ('homelab_cx4', (), {'nvidia_driver': {'open': False}}, 'not_applicable', ['nvidia']),   # inbox stack
    ('no_rdma_vm', (), {}, 'not_applicable', []),
])
def test_outcomes(tmp_path, profile, fault_names, changes, outcome, vendors):
    verdict = peermem_verdict(gdr_of(tmp_path, profile, *fault_names, **changes))
    assert (verdict['outcome'], verdict['vendors']) == (outcome, vendors), verdict['message']


def test_kernel_outcome_lists_the_options(tmp_path):
    verdict = peermem_verdict(gdr_of(tmp_path, 'metax_c500_cx7', 'mm_kobj_not_exported'))
    assert len(verdict['options']) == 3
    assert verdict['options'][0].startswith('run a kernel that still exports mm_kobj')
    assert 'dma-buf' in verdict['options'][1] and 'not known to work here: metax' in verdict['options'][1]
    assert verdict['kernel_release'] == '5.14.0-570.12.1.el9_6.x86_64'


def test_rejects_non_dict():
    with pytest.raises(AnsibleFilterError):
        peermem_verdict('gdr')
