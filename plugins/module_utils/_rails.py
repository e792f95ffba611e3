# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What each RDMA device of a node is for, and where it sits: the one owner of both decisions.

A GPU node carries the HCAs of its compute rails (one near each GPU or pair of GPUs) and often
others: a storage card, the port of the front-end or management network. Only the compute
rails carry the collectives' RDMA traffic, so only they are compared with each other, tested
pairwise, checked for lossless RoCE and counted against the peers' rails. A device's role comes
from what it is, never from its name:

- ``NCCL_IB_HCA``, where the node's settings name HCAs: what it selects is a compute rail, the
  rest is not (NCCL's own rule: src/transport/net_ib/init.cc, src/misc/utils.cc matchIfList; a
  leading ``^`` excludes, ``=`` makes the names exact, otherwise each entry is a prefix);
- else the GPU affinity of gpu_fabric_gdr's topology: each GPU's nearest NIC (module_utils/_gdr.py
  nearest_nics) is a rail, and so is every device of a rail's model (hca_type, board_id, link
  layers): a rail seated in the wrong slot is still a rail (GPU_NIC_FAR says where it sits);
  where the model is unknown, a device at the rails' full rate. A fault elsewhere cannot change
  a device's role: a rail trained down or down altogether keeps its model;
- with no GPU in the facts the topology cannot tell: every device counts as a rail.

A device that is not a rail is ``management`` when one of its netdevs carries the node's
default route (gpu_fabric_gdr.host.default_route_interface), else ``storage``.

Devices are ordered by position: PCI address (domain, bus, device, function as numbers), then
NUMA node, then the name in natural order (mlx5_2 before mlx5_10), never the name as text.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pci import DISTANCE_CLASSES

COMPUTE = 'compute'
STORAGE = 'storage'
MANAGEMENT = 'management'
ROLES = (COMPUTE, STORAGE, MANAGEMENT)

_BDF_RE = re.compile(r'^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$')


def natural_key(name: object) -> Any:
    """mlx5_2 before mlx5_10 (module_utils/_gdr.py natural_key)."""
    return _gdr.natural_key(name)


def position_key(name: object, pci_address: str | None = None, numa_node: object = None) -> tuple[Any, ...]:
    """Sort key of a device by where it sits: PCI address as numbers, NUMA node, natural name.
    A device without a PCI address (a software device such as rxe) sorts after those with one."""
    match = _BDF_RE.match(pci_address or '')
    pci = tuple(int(part, 16) for part in match.groups()) if match else None
    numa = numa_node if isinstance(numa_node, int) and numa_node >= 0 else 1 << 16
    return (0, pci, numa, natural_key(name)) if pci else (1, (), numa, natural_key(name))


def device_position(device: dict[str, Any]) -> tuple[Any, ...]:
    """position_key of a gpu_fabric_ib device (or gpu_fabric_gdr nic)."""
    return position_key(device.get('name'), device.get('pci_address'), device.get('numa_node'))


def ordered(devices: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``devices`` (dicts with name, pci_address, numa_node) in position order."""
    return sorted(devices or [], key=device_position)


def model(device: dict[str, Any]) -> tuple[Any, ...] | None:
    """(hca_type, board_id, link layers) of a device, or None where neither id is known."""
    kind = (device.get('hca_type'), device.get('board_id'))
    if not any(kind):
        return None
    return kind + tuple(sorted(set(p.get('link_layer') or '' for p in device.get('ports') or [])))


def top_rate(device: dict[str, Any]) -> Any:
    return max([p.get('rate_gbps') or 0 for p in device.get('ports') or []] or [0]) or None


def ib_hca_selects(value: object, name: str) -> bool | None:
    """Does NCCL_IB_HCA ``value`` select device ``name`` (any of its ports)? None: no value."""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    exclude = value.startswith('^')
    value = value[1:] if exclude else value
    exact = value.startswith('=')
    value = value[1:] if exact else value
    entries = [entry.strip().split(':', 1)[0] for entry in value.split(',') if entry.strip()]
    hit = any(name == entry if exact else name.startswith(entry) for entry in entries)
    return hit != exclude


def settings_ib_hca(*settings: object) -> str | None:
    """NCCL_IB_HCA of a node's settings, ``settings`` in the order they win (the collective's
    environment fabric_collective_env, then nccl_conf_overrides, which role nccl_conf writes):
    the first that names it as a non-blank string, stripped; None where none does."""
    for entry in settings:
        value = entry.get('NCCL_IB_HCA') if isinstance(entry, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _names_of(ib: dict[str, Any] | None, gdr: dict[str, Any] | None) -> list[dict[str, Any]]:
    devices = (ib or {}).get('devices')
    if devices is None:
        devices = (gdr or {}).get('nics') or []
    return [d for d in devices if isinstance(d, dict) and d.get('name')]


def gpu_affinity(gdr: dict[str, Any] | None, name: str) -> tuple[Any, Any]:
    """(distance class, GPU name) of the GPU nearest to NIC ``name``, or (None, None)."""
    best: tuple[Any, Any] = (None, None)
    for pair in (gdr or {}).get('topology') or []:
        if pair.get('nic') != name or pair.get('distance') not in DISTANCE_CLASSES:
            continue
        rank = (DISTANCE_CLASSES.index(pair['distance']), natural_key(pair.get('gpu')))
        if best[0] is None or rank < (DISTANCE_CLASSES.index(best[0]), natural_key(best[1])):
            best = (pair['distance'], pair.get('gpu'))
    return best


def roles(ib: dict[str, Any] | None, gdr: dict[str, Any] | None = None, ib_hca: str | None = None) -> dict[str, dict[str, Any]]:
    """{device name: {'role', 'why', 'model', 'gpu_distance', 'gpu'}} for every RDMA device.

    ``ib``: gpu_fabric_ib (None: gdr's nics stand in, without models); ``gdr``: gpu_fabric_gdr;
    ``ib_hca``: the node's NCCL_IB_HCA where its settings name one."""
    devices = _names_of(ib, gdr)
    names = [d['name'] for d in devices]
    host = (gdr or {}).get('host')
    route = host.get('default_route_interface') if isinstance(host, dict) else None
    result: dict[str, dict[str, Any]] = {}

    def other(device: dict[str, Any], why: str) -> tuple[str, str]:
        netdevs = set(p.get('netdev') for p in device.get('ports') or [] if p.get('netdev'))
        if route and route in netdevs:
            return MANAGEMENT, why + '; its netdev %s carries the default route' % route
        return STORAGE, why

    selected = dict((name, ib_hca_selects(ib_hca, name)) for name in names)
    nearest = _gdr.nearest_nics((gdr or {}).get('topology'), set(names)) if (gdr or {}).get('gpus') else {}
    serving: dict[str, list[str]] = {}
    for gpu in sorted(nearest, key=natural_key):
        serving.setdefault(nearest[gpu][1], []).append(gpu)
    by_name = dict((d['name'], d) for d in devices)
    rail_models = set(model(by_name[name]) for name in serving if name in by_name) - set([None])
    rail_rate = max([top_rate(by_name[name]) or 0 for name in serving if name in by_name] or [0]) or None
    for device in devices:
        name = device['name']
        kind = model(device)
        if any(selected.values()):
            # NCCL_IB_HCA that selects none of the node's devices names another node's: not used.
            role, why = (COMPUTE, 'selected by NCCL_IB_HCA %s' % ib_hca) if selected[name] else \
                other(device, 'not selected by NCCL_IB_HCA %s' % ib_hca)
        elif not serving:
            role, why = COMPUTE, 'no GPU topology in the facts to tell compute rails from other NICs'
        elif name in serving:
            role, why = COMPUTE, 'the nearest NIC of %s' % ', '.join(serving[name])
        elif kind is not None and rail_models:
            if kind in rail_models:
                role, why = COMPUTE, 'the model of the compute rails (%s)' % ' '.join(str(p) for p in kind if p)
            else:
                role, why = other(device, 'the nearest NIC of no GPU, of another model (%s) than the compute rails'
                                  % ' '.join(str(p) for p in kind if p))
        elif top_rate(device) is None or rail_rate is None or top_rate(device) == rail_rate:
            role, why = COMPUTE, 'the rate of the compute rails (model unknown)'
        else:
            role, why = other(device, 'the nearest NIC of no GPU, at %g Gb/s below the compute rails\' %g Gb/s (model unknown)'
                              % (top_rate(device), rail_rate))
        distance, gpu = gpu_affinity(gdr, name)
        result[name] = {'role': role, 'why': why, 'model': kind, 'gpu_distance': distance, 'gpu': gpu}
    return result


def node_roles(node: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """roles() of a node of the diagnosis ({'ib', 'gdr', 'nccl_ib_hca'})."""
    node = node or {}
    return roles(node.get('ib'), node.get('gdr'), node.get('nccl_ib_hca'))


def compute(ib: dict[str, Any] | None, gdr: dict[str, Any] | None = None, ib_hca: str | None = None,
            role_of: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The names of the compute rails, in position order."""
    role_of = role_of if role_of is not None else roles(ib, gdr, ib_hca)
    return [d['name'] for d in ordered(_names_of(ib, gdr)) if (role_of.get(d['name']) or {}).get('role') == COMPUTE]


def is_compute(role_of: dict[str, dict[str, Any]], name: str) -> bool:
    """Is ``name`` a compute rail in ``role_of`` (roles()'s answer)? A name it does not know is."""
    return (role_of.get(name) or {}).get('role', COMPUTE) == COMPUTE
