# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: nccl_settings
author: hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
short_description: Recommended NCCL settings of one node, each with the fact that justifies it
version_added: 0.1.0
description:
  - Reads one node's C(gpu_fabric_ib) (from C(hpc.gpu_fabric.ib_link_facts)) and C(gpu_fabric_gdr)
    (from C(hpc.gpu_fabric.gdr_facts)) and recommends only what those facts justify.
  - C(NCCL_IB_HCA) - the ACTIVE ports of the NICs next to the GPUs, as exact names (C(=mlx5_0:1,mlx5_1:1));
    ports that are down are left out, and so is a NIC that is the nearest of no GPU and slower than the
    NICs next to the GPUs (a storage or management NIC).
  - C(NCCL_IB_GID_INDEX) - on RoCE ports, the index of the RoCE v2 GID with an IPv4 address when it is the
    same on every port; not set on InfiniBand.
  - C(NCCL_NET_GDR_LEVEL) - when GPUDirect RDMA is ready, the largest distance between a GPU and its nearest
    NIC (NCCL uses GPUDirect RDMA up to that distance); not set when it is not ready.
  - C(NCCL_SOCKET_IFNAME) - the interface of the default route (C(gpu_fabric_gdr.host.default_route_interface)),
    as an exact name; not set when the facts do not carry it.
  - What cannot be decided is explained in C(notes), never guessed.
options:
  _input:
    description: The node's C(gpu_fabric_ib) facts.
    type: dict
    required: true
  gdr:
    description: The node's C(gpu_fabric_gdr) facts; without them no port is told apart by topology and
      C(NCCL_NET_GDR_LEVEL) and C(NCCL_SOCKET_IFNAME) are not set.
    type: dict
'''

EXAMPLES = r'''
- name: Recommend NCCL settings for this node
  ansible.builtin.set_fact:
    nccl: "{{ ansible_facts.gpu_fabric_ib | hpc.gpu_fabric.nccl_settings(ansible_facts.gpu_fabric_gdr) }}"

- name: Show why each value, and what was left unset
  ansible.builtin.debug:
    msg: "{{ nccl.reasons | combine({'notes': nccl.notes}) }}"
'''

RETURN = r'''
_value:
  description: The recommendation.
  type: dict
  contains:
    settings:
      description: Variable name -> value, as strings (the KEY=VALUE lines of C(/etc/nccl.conf)).
      type: dict
      sample: {NCCL_IB_HCA: "=mlx5_0:1,mlx5_1:1", NCCL_NET_GDR_LEVEL: PXB}
    reasons:
      description: Variable name -> why that value, citing the facts; one entry per setting.
      type: dict
    notes:
      description:
        - Settings left unset and why, and what else a reader of the settings should know.
        - A note about one setting starts with its name, for example C(NCCL_SOCKET_IFNAME not set) and the reason.
      type: list
      elements: str
'''

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._nccl_env import recommend


def nccl_settings(ib: Any, gdr: Any = None) -> dict[str, Any]:
    if not isinstance(ib, dict):
        raise AnsibleFilterError('nccl_settings expects gpu_fabric_ib (a dict), got %s' % type(ib).__name__)
    if gdr is not None and not isinstance(gdr, dict):
        raise AnsibleFilterError('nccl_settings: gdr must be gpu_fabric_gdr (a dict), got %s' % type(gdr).__name__)
    return recommend(ib, gdr)


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'nccl_settings': nccl_settings}
