# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a pair test's window reads on a node besides the IB error counters (module_utils/_ib.py
error_counters): read before the first step and after each step of a sequence (module_utils/_sequence.py),
compared by the controller (plugin_utils/bench/_window.py).

- the PCIe AER counts (module_utils/_aer.py) of each HCA, of each GPU a test of the sequence uses, and of
  every bridge on their path up to the root port (an endpoint's errors may be counted at its link
  partner: kernel Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats);
- the congestion counters of each port (mlx5 hw_counters, already in read_ib()'s facts: no extra read);
- the per-priority pause counters of each RoCE port's netdev (``ethtool -S``, one run per netdev and
  read, bounded: module_utils/_ethtool.py);
- ``sample_links``: the PCIe link speed and width of the HCAs and GPUs, read while the tests run (an idle
  GPU lowers its link speed to save power; under load it runs at its trained speed).

Node-side, sysfs reads only (and ethtool on RoCE ports): the cost per step is measured by
tests/bench/window_cost.py.
"""

from __future__ import annotations

from typing import Any, Iterable

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _aer, _ethtool
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pci import PCI_DEVICES, split_device_path
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pcie import parse_speed, parse_width
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

# mlx5 hw_counters of a port (kernel drivers/infiniband/hw/mlx5/counters.c; NVIDIA "Understanding mlx5 Linux
# Counters"): CNPs this port sent as the notification point (np_cnp_sent: it received ECN-marked packets,
# np_ecn_marked_roce_packets), CNPs it handled as the reaction point (rp_cnp_handled: it lowered its rate)
# or ignored (rp_cnp_ignored), and the loss counters of RC traffic.
CC_COUNTERS = ('np_cnp_sent', 'np_ecn_marked_roce_packets', 'rp_cnp_handled', 'rp_cnp_ignored')
LOSS_COUNTERS = ('out_of_sequence', 'packet_seq_err', 'local_ack_timeout_err')
# The parts of a read that do not change while the node runs (perftest_run sends them with its first read only).
STATIC = ('paths', 'gpu_paths', 'roce')
# A path has the root port, a few switch ports and the device; more is no real tree.
PATH_MAX = 12


def pci_path(sysroot: SysRoot, bdf: Any) -> list[str]:
    """The PCI functions from the root port down to ``bdf`` (``bdf`` last), [] when it is not found."""
    if not isinstance(bdf, str):
        return []
    resolved = sysroot.resolve('%s/%s' % (PCI_DEVICES, bdf))
    if not resolved:
        return []
    chain = split_device_path(resolved)[1]
    return chain[-PATH_MAX:] if chain and chain[-1] == bdf else []


def _port_counters(device: dict[str, Any]) -> dict[str, int]:
    """The congestion and loss counters of a device's first port (hw_counters)."""
    ports = [p for p in device.get('ports') or [] if isinstance(p, dict)]
    hw = (ports[0].get('hw_counters') if ports else None) or {}
    return dict((name, hw[name]) for name in CC_COUNTERS + LOSS_COUNTERS if isinstance(hw.get(name), int))


def _roce_netdev(device: dict[str, Any]) -> str | None:
    for port in device.get('ports') or []:
        if isinstance(port, dict) and port.get('link_layer') == 'Ethernet' and port.get('netdev'):
            return str(port['netdev'])
    return None


def read_window(sysroot: SysRoot, devices: list[dict[str, Any]], gpu_bdfs: Iterable[Any] = (), ethtool: str | None = None,
                timeout: float = _ethtool.TIMEOUT_S) -> dict[str, Any]:
    """One read of the window's counters: {'paths': {hca: [bdf...]}, 'gpu_paths': {gpu bdf: [bdf...]},
    'aer': {bdf: counts}, 'cc': {hca: counters}, 'pause': {hca: counters}, 'roce': [HCAs with a RoCE port],
    'unread': {what: why}}.
    ``devices``: read_ib() of the same moment; ``ethtool``: its path (None: not installed, said)."""
    paths: dict[str, list[str]] = {}
    gpu_paths: dict[str, list[str]] = {}
    aer: dict[str, dict[str, int]] = {}
    cc: dict[str, dict[str, int]] = {}
    pause: dict[str, dict[str, int]] = {}
    unread: dict[str, str] = {}
    roce: list[str] = []
    netdevs: dict[str, str] = {}
    for device in devices or []:
        name = device.get('name')
        if not isinstance(name, str):
            continue
        paths[name] = pci_path(sysroot, device.get('pci_address'))
        cc[name] = _port_counters(device)
        netdev = _roce_netdev(device)
        if netdev is None:
            continue
        roce.append(name)
        netdevs[name] = netdev
    if netdevs and ethtool is None:
        unread.update(('pause ' + name, 'ethtool is not installed: the pause counters of %s were not read' % netdev)
                      for name, netdev in netdevs.items())
    elif netdevs and ethtool is not None:
        answers = _ethtool.read_pauses(sorted(set(netdevs.values())), ethtool, timeout)
        for name, netdev in netdevs.items():
            counters, why = answers[netdev]
            if counters is None:
                unread['pause ' + name] = why or 'not read'
            else:
                pause[name] = counters
    for bdf in sorted(set(b for b in gpu_bdfs if isinstance(b, str))):
        gpu_paths[bdf] = pci_path(sysroot, bdf)
    for bdf in sorted(set(b for chain in list(paths.values()) + list(gpu_paths.values()) for b in chain)):
        counts = _aer.read_aer(sysroot, bdf)
        if counts is not None:
            aer[bdf] = counts
    return {'paths': paths, 'gpu_paths': gpu_paths, 'aer': aer, 'cc': cc, 'pause': pause, 'roce': roce, 'unread': unread}


def link_bdfs(window: Any) -> list[str]:
    """The functions whose link a sample reads: each HCA and each GPU (the last of each path)."""
    window = window if isinstance(window, dict) else {}
    found = set()
    for key in ('paths', 'gpu_paths'):
        for chain in (window.get(key) or {}).values():
            if chain:
                found.add(chain[-1])
    return sorted(found)


def sample_links(sysroot: SysRoot, bdfs: Iterable[str]) -> dict[str, list[Any]]:
    """{bdf: [speed GT/s, width]} of each function's link now (None where not read)."""
    found = {}
    for bdf in bdfs:
        base = '%s/%s/' % (PCI_DEVICES, bdf)
        found[bdf] = [parse_speed(sysroot.text(base + 'current_link_speed', quiet=True)),
                      parse_width(sysroot.text(base + 'current_link_width', quiet=True))]
    return found
