# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The facts of a simulated node as the facts modules return them, without Ansible: a
profile (plus faults and changes) rendered into a directory and read there by the same
readers ib_link_facts and gdr_facts use. Needs ansible_collections.hpc.gpu_fabric importable."""

from __future__ import annotations

import copy

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import read_gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._host import read_host
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices, read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._roce import read_roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import faults, render, tools_gpu, tools_qos


def read(root, profile_name, fault_names=(), changes=None, targets=None, host=True, gpu=False):  # pylint: disable=too-many-arguments
    """{'ib': gpu_fabric_ib, 'gdr': gpu_fabric_gdr} of ``profile_name`` rendered at ``root``.

    ``changes`` {section: {key: value}} updates the profile's sections before the faults;
    ``targets`` gives each fault its target (an HCA name, ...) in the same order;
    ``host`` False leaves out gdr['host'] (gdr_facts adds it from its own reader); ``gpu`` True adds
    'gpu' (gpu_state_facts over the nvidia-smi stand-in).
    """
    profile = copy.deepcopy(render.load_profile(profile_name))
    for section, values in (changes or {}).items():
        profile.setdefault(section, {}).update(values)
    for index, name in enumerate(fault_names):
        faults.apply(profile, name, (targets or [None] * len(fault_names))[index])
    render.render(profile, str(root))
    sysroot = SysRoot(str(root))
    gdr = read_gdr(sysroot, list_rdma_devices(sysroot))
    gdr.pop('host', None)
    if host:
        gdr['host'] = read_host(sysroot)
    devices = read_ib(sysroot)
    # RoCE QoS (roce_qos_facts): the mlnx_qos/dcb stand-ins answered in-process (same text).
    roce = {'ports': read_roce(sysroot, devices, lambda argv: tools_qos.answer(str(root), argv)[:2]),
            # The simulated RoCE nodes are set by roce_qos (the host manages their DCB): roce_qos_facts dcbx_expected.
            'dcbx_expected': profile.get('dcbx_expected', 'host')}
    facts = {'ib': {'devices': devices}, 'gdr': gdr, 'roce': roce}
    if gpu:
        # gpu_state_facts: the nvidia-smi stand-in answered in-process (tests/sim/tools_gpu.py).
        facts['gpu'] = tools_gpu.read_facts(str(root))
    return facts
