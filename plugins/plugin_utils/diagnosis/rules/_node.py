# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rules over one node's facts, bottom-up: the IB layer (ports, rates, counters, MTU, RoCE GIDs),
then IB+GPU (peer memory and why, ACS, NUMA), then the host (CPU governor, locked memory, modules
lost at the next boot)."""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import BEYOND_GDR_LEVEL, DEFAULT_GDR_LEVEL, PEER_PATHS, dmabuf_stands_in, peer_verdict
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import ERROR_COUNTERS
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pci import DISTANCE_CLASSES
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # what role each HCA plays

# NCCL_NET_GDR_LEVEL default (PXB, module_utils/_gdr.py): a GPU farther from its NIC than this is not used for GDR.
FAR = BEYOND_GDR_LEVEL


# ---------------------------------------------------------------------------- IB layer

def _port_down(host, device, port, subject, role_of):
    why = ('no link partner (cable, transceiver or switch port)' if port.get('phys_state') == 'Polling'
           else 'the link is down or disabled')
    # A compute rail down is a fault; the second port of a storage or management card is often
    # left uncabled by design and carries no collective: said, as info.
    rail = _rails.is_compute(role_of, device['name'])
    mine = role_of.get(device['name']) or {}
    return finding(
        F.IB_PORT_DOWN, host, subject,
        {'state': port.get('state'), 'phys_state': port.get('phys_state'), 'role': mine.get('role') or _rails.COMPUTE},
        'port is %s, physical state %s: %s%s' % (
            port.get('state'), port.get('phys_state'), why, '' if rail else
            '; it is a %s port (%s), not a compute rail: no collective goes through it' % (mine.get('role'), mine.get('why'))),
        severity=None if rail else 'info', device=device['name'], at=[('hca', host, device['name'])])


def _rate_degraded(host, ib, device, port, subject, role_of):
    """IB_RATE_DEGRADED for an ACTIVE port on one lane or slower than its peers, or None.

    Peers of a port: the node's other ACTIVE ports of its model and role on its link layer
    (_rails.roles): a storage card's 100 GbE ports are not slow next to a 200 GbE one of another
    model. A 1X InfiniBand link is a fault in any role (a 4X link with lanes lost); on Ethernet, mlx5
    reports single-lane 25/50/100GbE as 1X (drivers/infiniband/hw/mlx5/main.c translate_eth_*_proto_oper:
    25GBASE-CR -> IB_WIDTH_1X), so there only the rate against its peers tells."""
    mine = role_of.get(device['name']) or {}
    group = (_rails.model(device), mine.get('role'), port.get('link_layer'))
    others = [p.get('rate_gbps') for d in (ib or {}).get('devices') or [] for p in d.get('ports') or []
              if p is not port and p.get('state') == 'ACTIVE' and p.get('rate_gbps')
              and (_rails.model(d), (role_of.get(d['name']) or {}).get('role'), p.get('link_layer')) == group]
    best = max(others) if others else None
    slower = bool(best and port.get('rate_gbps') and port['rate_gbps'] < best)
    lanes_lost = port.get('width') == '1X' and port.get('link_layer') != 'Ethernet'
    if not (lanes_lost or slower):
        return None
    # sysfs's rate names the width already ('100 Gb/sec (1X NDR)', drivers/infiniband/core/sysfs.c
    # rate_show): said once.
    trained = port.get('rate') or 'an unknown rate'
    if port.get('width') and port['width'] not in trained:
        trained = '%s (%s)' % (trained, port['width'])
    return finding(
        F.IB_RATE_DEGRADED, host, subject,
        {'rate': port.get('rate'), 'width': port.get('width'), 'others_gbps': best, 'role': mine.get('role'),
         'model': list(group[0]) if group[0] else None},
        'the link trained at %s%s: every test and every ring through it runs at this rate' % (
            trained,
            ', below the node\'s other %s ports of its model and role (%s, %s Gb/s)' % (
                port.get('link_layer'), mine.get('role') or '?', best) if slower else ', on a single lane'),
        at=[('hca', host, device['name'])])


def _error_counters(host, device, port, subject):
    counters = dict((k, v) for k, v in (port.get('counters') or {}).items() if k in ERROR_COUNTERS and v)
    if not (counters or port.get('counters_saturated')):
        return None
    return finding(
        F.IB_ERROR_COUNTERS, host, subject,
        {'counters': counters, 'saturated': port.get('counters_saturated') or []},
        'the port has counted link errors since the counters were last cleared%s' % (
            ' (some saturated: the real count is unknown)' if port.get('counters_saturated') else ''),
        at=[('hca', host, device['name'])], path=[('hca', host, device['name'])])


def _no_v2_gid(host, device, port, subject, role_of):
    types = [g.get('type') for g in port.get('gids') or []]
    if port.get('link_layer') != 'Ethernet' or 'RoCE v2' in types:
        return None
    # On a storage or management port no collective goes: said, not an error.
    mine = role_of.get(device['name']) or {}
    compute = _rails.is_compute(role_of, device['name'])
    return finding(
        F.ROCE_NO_V2_GID, host, subject, {'gid_types': types, 'role': mine.get('role')},
        'no RoCE v2 GID on the port (no IP address on its netdev, or RoCE v2 disabled): %s' % (
            'NCCL cannot pick a routable GID (NCCL_IB_GID_INDEX)' if compute
            else 'RDMA over it cannot be routed; it is a %s port (%s), not a compute rail' % (
                mine.get('role'), mine.get('why'))),
        severity=None if compute else 'info',
        at=[('hca', host, device['name'])])


def ib_findings(host, ib, role_of=None):
    """Port findings of one node; ``role_of``: module_utils/_rails.py roles() of the node (from
    ``ib`` alone when not given: no GPU affinity, every device a compute rail)."""
    found = []
    role_of = role_of if role_of is not None else _rails.roles(ib)
    for device in (ib or {}).get('devices') or []:
        for port in device.get('ports') or []:
            subject = '%s/%s' % (device['name'], port.get('port'))
            if port.get('state') != 'ACTIVE':
                found.append(_port_down(host, device, port, subject, role_of))
                continue
            found.extend(item for item in (_rate_degraded(host, ib, device, port, subject, role_of),
                                           _error_counters(host, device, port, subject),
                                           _no_v2_gid(host, device, port, subject, role_of)) if item)
    return found


def mtu_findings(nodes, roles=None):
    """Fleet rule: ports of the compute rails of different nodes with different active MTUs
    (a storage or management port's MTU is its own network's: _rails.roles). ``roles``:
    {host: _rails.roles()} where the caller has them."""
    seen = {}
    for host in sorted(nodes):
        role_of = (roles or {}).get(host)
        role_of = role_of if role_of is not None else _rails.node_roles(nodes[host])
        for device in (nodes[host].get('ib') or {}).get('devices') or []:
            if not _rails.is_compute(role_of, device['name']):
                continue
            for port in device.get('ports') or []:
                mtu = port.get('active_mtu')
                if port.get('link_layer') == 'Ethernet':
                    mtu = mtu or port.get('netdev_mtu')
                if port.get('state') == 'ACTIVE' and mtu:
                    seen.setdefault((port.get('link_layer'), mtu), []).append('%s:%s' % (host, device['name']))
    found = []
    for layer in set(key[0] for key in seen):
        values = sorted((len(v), mtu) for (lay, mtu), v in seen.items() if lay == layer)
        if len(values) > 1:
            common = values[-1][1]
            for (lay, mtu), ports in sorted(seen.items()):
                if lay == layer and mtu != common:
                    for port in ports:
                        found.append(finding(F.MTU_MISMATCH, port.split(':')[0], port.split(':')[1],
                                             {'mtu': mtu, 'most_ports': common},
                                             '%s MTU %s differs from the %s most ports use' % (layer, mtu, common)))
    return found


# ---------------------------------------------------------------------------- IB + GPU layer

def gpu_net_path(gdr):
    """How NCCL moves this node's GPU buffers over the network, from the facts alone.

    NCCL's IB transport (src/transport/net_ib.cc) uses GPUDirect RDMA when a peer-memory
    client is registered (ncclIbGdrSupport: /sys/kernel/mm/memory_peers/<client>/version or
    /sys/module/nvidia_peermem) or when dma-buf registration works (ncclIbDmaBufSupport,
    NCCL_DMABUF_ENABLE); otherwise it stages through host memory. Without an RDMA device NCCL
    has no IB transport at all and uses its socket transport (src/transport/net_socket.cc).
    """
    gdr = gdr or {}
    if not gdr.get('gpus'):
        return None
    if not gdr.get('nics'):
        return 'socket'
    paths = ((gdr.get('peer_memory') or {}).get('paths') or {}).values()
    if paths and all(path.get('detected') for path in paths):
        return 'peermem'
    if (gdr.get('dmabuf') or {}).get('possible'):
        return 'dmabuf'
    return 'host_memory'


_PATH_WORDS = {
    'peermem': 'GPUDirect RDMA through the peer-memory client',
    'dmabuf': 'GPUDirect RDMA through dma-buf (no peer-memory client needed)',
    'host_memory': 'the IB transport without GPUDirect RDMA: every message is copied through host memory',
    'socket': 'the socket transport (TCP through host memory): no RDMA at all',
}


def _nothing_there(host, gdr, devices):
    """HOST_NOTHING_TO_CHECK or GDR_NO_RDMA_NIC where the node has no GPU and no RDMA device, or GPUs
    without an RDMA device; None where it has both kinds to judge."""
    if not gdr.get('gpus') and not gdr.get('nics') and not devices:
        # Fail closed: a node where nothing of the GPU fabric was found was not validated, it is
        # not "ok" (a container that does not see /sys, a driver not loaded, the wrong inventory).
        return finding(F.HOST_NOTHING_TO_CHECK, host, 'node',
                       {'gpus': 0, 'rdma_devices': 0, 'reasons': gdr.get('reasons') or []},
                       'no GPU of a supported vendor and no RDMA device were found on %s, so nothing of the GPU '
                       'fabric could be checked (GPU and HCA drivers not loaded, a container or VM that does not '
                       'see the devices or /sys, or a host that is not a GPU node)' % host)
    if gdr.get('gpus') and not gdr.get('nics') and not devices:
        return finding(F.GDR_NO_RDMA_NIC, host, 'node',
                       {'gpus': len(gdr['gpus']), 'rdma_devices': 0, 'nccl_path': 'socket'},
                       '%d GPU(s) but no RDMA device (/sys/class/infiniband is empty): NCCL has no IB/RoCE '
                       'transport and uses %s between nodes; GPUDirect RDMA is impossible'
                       % (len(gdr['gpus']), _PATH_WORDS['socket']))
    return None


def _peer_blockers(host, gdr, path_now):
    """What blocks each peer-memory path (the facts' own decision, _gdr.peer_verdict; its code the registry's)."""
    found = []
    kernel, ofed = gdr.get('kernel') or {}, gdr.get('ofed') or {}
    for vendor, path in sorted(((gdr.get('peer_memory') or {}).get('paths') or {}).items()):
        # Which root, in which words, and whether dma-buf stands in: the facts' own decision; its
        # code the registry's (the node names what blocks, never a finding code).
        verdict = peer_verdict(vendor, path, kernel, ofed, gdr.get('dmabuf'))
        if verdict is None:
            continue
        found.append(finding(F.PEER_BLOCKER_CODES[verdict['blocker']], host, vendor,
                             {'client': path.get('client'), 'module_loaded': path.get('module_loaded'),
                              'mm_kobj_exported': kernel.get('mm_kobj_exported'),
                              'have_mm_kobj_exported': ofed.get('have_mm_kobj_exported'),
                              'dmabuf_possible': (gdr.get('dmabuf') or {}).get('possible'), 'nccl_path': path_now},
                             '%s; NCCL will use %s' % (' -> '.join(verdict['chain']), _PATH_WORDS[path_now]),
                             severity=None if verdict['blocking'] else 'warning', remedy=verdict['remedy'],
                             # Where dma-buf stands in, GPU memory still goes straight to the NIC: the missing
                             # peer-memory path is no test's cause, so it sits on the node's peer-memory set-up alone.
                             at=[('node', host)] if verdict['blocking'] else [('peer_memory', host)]))
    return found


def _gpu_nic_pairs(host, gdr):
    """ACS redirecting, or a NIC far, on the path of each GPU to its nearest NIC."""
    found = []
    for pair in gdr.get('topology') or []:
        gpu = next((g for g in gdr.get('gpus') or [] if g['name'] == pair['gpu']), {})
        if gpu.get('nearest_nic') != pair['nic']:
            continue
        subject = '%s<->%s' % (pair['gpu'], pair['nic'])
        if pair.get('acs_redirect'):
            found.append(finding(F.GDR_ACS_REDIRECT, host, subject,
                                 {'bridges': pair.get('acs_redirect_bridges')},
                                 'PCIe ACS on %s redirects GPU<->NIC peer-to-peer traffic up to the root complex'
                                 % ', '.join(pair.get('acs_redirect_bridges') or []),
                                 # The GPU<->NIC path of this pair (GPU-memory tests over this GPU and NIC);
                                 # and the GPUs' PCIe peer traffic, which the same bridges redirect (NCCL's
                                 # troubleshooting guide, "PCI Access Control Services (ACS)").
                                 at=[('gpu_nic', host, pair['gpu'], pair['nic']), ('gpus', host)]))
        if pair.get('distance') in FAR:
            found.append(finding(F.GPU_NIC_FAR, host, subject, {'distance': pair['distance']},
                                 '%s is the nearest NIC of %s but %s away (across the CPU or NUMA nodes): NCCL does not use '
                                 'GPUDirect RDMA beyond %s by default and the traffic crosses the socket'
                                 % (pair['nic'], pair['gpu'], pair['distance'], DEFAULT_GDR_LEVEL),
                                 at=[('gpu_nic', host, pair['gpu'], pair['nic'])]))
    return found


def _misplaced_nics(host, gdr, role_of):
    """A NIC that no GPU is near, while the node's other NICs each have one: it was seated in
    the wrong slot (the other socket), and the GPU that should use it shares another NIC."""
    near = dict((nic['name'], min([DISTANCE_CLASSES.index(p['distance']) for p in gdr.get('topology') or []
                                   if p['nic'] == nic['name'] and p.get('distance') in DISTANCE_CLASSES] or [len(DISTANCE_CLASSES)]))
                for nic in gdr.get('nics') or [])
    close = [name for name, level in near.items() if level < len(DISTANCE_CLASSES) and DISTANCE_CLASSES[level] not in FAR]
    if len(close) < 2:
        return []
    # Only a NIC of the compute rails: a storage or management NIC is meant to sit elsewhere.
    # Which NIC is a rail is _rails.roles' decision (by model, which a fault elsewhere cannot
    # change; the rails' full rate only where the model is unknown).
    found = []
    for name, level in sorted(near.items(), key=lambda item: _rails.natural_key(item[0])):
        if name not in close and level < len(DISTANCE_CLASSES) and _rails.is_compute(role_of, name):
            found.append(finding(F.GPU_NIC_FAR, host, name, {'nearest_gpu_distance': DISTANCE_CLASSES[level]},
                                 '%s has no GPU nearer than %s while the node\'s other NICs sit under a GPU\'s PCIe switch: '
                                 'a GPU whose rail it is reaches it across the socket' % (name, DISTANCE_CLASSES[level]),
                                 # Every GPU-memory test over this NIC (GPU_NIC_FAR explains GPU-memory symptoms only).
                                 remedy='nic_slot', at=[('hca', host, name)]))
    return found


def gdr_findings(host, gdr, ib=None, role_of=None):
    """``role_of``: module_utils/_rails.py roles() of the node (from ``ib`` and ``gdr`` when not given)."""
    gdr = gdr or {}
    alone = _nothing_there(host, gdr, (ib or {}).get('devices') or [])
    if alone is not None:
        return [alone]
    if not gdr.get('gpus') or not gdr.get('nics'):
        return []
    path_now = gpu_net_path(gdr)
    role_of = role_of if role_of is not None else _rails.roles(ib, gdr)
    found = _peer_blockers(host, gdr, path_now) + _gpu_nic_pairs(host, gdr) + _misplaced_nics(host, gdr, role_of)
    if gdr.get('gdr_ready') is False and not any(f['severity'] != 'info' for f in found):
        # Fail closed: the facts say GPUDirect RDMA is not ready for a reason no rule above names.
        found.append(finding(F.GDR_NOT_READY, host, 'node',
                             {'reasons': gdr.get('reasons') or [], 'nccl_path': path_now},
                             'GPUDirect RDMA is not ready: %s; NCCL will use %s'
                             % ('; '.join(gdr.get('reasons') or ['no reason given']), _PATH_WORDS[path_now])))
    return found


# ---------------------------------------------------------------------------- host layer

# What one ib_write_bw of the benchmark pins: perftest registers 2 x max(message size, cycle
# buffer) per QP in one ibv_reg_mr (perftest_resources.c alloc_ctx: buff_size), 16 MiB for the
# 8 MiB messages of fabric_bench_size. ib_umem_get() refuses a registration beyond RLIMIT_MEMLOCK
# with ENOMEM (drivers/infiniband/core/umem.c), so a soft limit below this fails the benchmark
# ('Couldn't allocate MR'); the 8 MiB default of kernels since 5.16 (commit 9dcc38e2813e) and of
# systemd (DefaultLimitMEMLOCK=8M) is below it, the 64 KiB of older kernels far below.
MEMLOCK_NEEDED_BYTES = 2 * 8 * 1024 * 1024
# Modules nothing else loads at boot. The peer-memory module: neither the NVIDIA driver nor
# udev loads it (the rdma_modules role lists it for NVIDIA GPUs). The RDMA user-space modules:
# MLNX OFED's openibd service loads them at boot, rdma-core's /etc/rdma/modules files do (read
# into modules_persistent); on a node with neither only modules-load.d brings them back. ib_core
# and the HCA driver come back with the device (PCI modalias).
PEER_MODULES = PEER_PATHS['nvidia']['modules']
RDMA_USER_MODULES = ('ib_uverbs', 'ib_umad', 'rdma_ucm', 'ib_ipoib')


def _human_bytes(value):
    if value == 'unlimited' or not isinstance(value, int):
        return str(value)
    for unit, size in (('GiB', 1 << 30), ('MiB', 1 << 20), ('KiB', 1 << 10)):
        if value >= size and value % size == 0:
            return '%d %s' % (value // size, unit)
    return '%d bytes' % value


def _governor(host, facts):
    governors = facts.get('cpu_governors') or {}
    slow = dict((name, count) for name, count in governors.items() if name != 'performance')
    if not (facts.get('cpufreq') and slow):
        return []
    return [finding(
        F.HOST_CPU_GOVERNOR, host, 'cpufreq', {'governors': governors},
        '%d of %d CPUs run %s, not performance: RDMA polling loops and NCCL proxy threads run on cores '
        'that are not at full clock; perftest says "Conflicting CPU frequency values" and "CPU Frequency is '
        'not max", and latencies read high'
        % (sum(slow.values()), sum(governors.values()), ', '.join(sorted(slow))))]


def _memlock_login(host, memlock):
    """The locked-memory limit a job started like the benchmark gets."""
    soft = memlock.get('soft')
    if not isinstance(soft, int):
        return []
    configured = [e['file'] for e in memlock.get('limits_conf') or []
                  if e.get('type') in ('soft', '-') and e.get('bytes') == 'unlimited' and e.get('domain') != 'root']
    # Only the DefaultLimitMEMLOCK= systemd applies (the last one read) raises the limit.
    configured += [e['file'] for e in (memlock.get('systemd') or [])[-1:] if e.get('soft') == 'unlimited']
    evidence = {'soft': soft, 'hard': memlock.get('hard'), 'cap_ipc_lock': memlock.get('cap_ipc_lock'),
                'needed_bytes': MEMLOCK_NEEDED_BYTES, 'configured_unlimited_in': sorted(set(configured))}
    if memlock.get('cap_ipc_lock'):
        # Root with CAP_IPC_LOCK is not held to the limit (ib_umem_get), so the benchmark run as
        # root is not either; what matters then is what other users' jobs get.
        return [] if configured else [finding(
            F.HOST_MEMLOCK_LIMITED, host, 'memlock', evidence,
            'locked memory is limited to %s and no limits.conf entry or DefaultLimitMEMLOCK raises it: this '
            'process has CAP_IPC_LOCK (root) and is exempt, but a job of another user gets this limit and its '
            'ibv_reg_mr fails with ENOMEM beyond it' % _human_bytes(soft), severity='warning')]
    stale = (' %s configure unlimited, but this process did not get it: limits apply to new logins, and to '
             'services after systemctl daemon-reexec and a restart' % ', '.join(sorted(set(configured)))) if configured else ''
    severity = 'error' if soft < MEMLOCK_NEEDED_BYTES else 'warning'
    why = ('below the %s one ib_write_bw of the benchmark registers (2 x 8 MiB messages): ibv_reg_mr fails with '
           'ENOMEM ("Couldn\'t allocate MR"), and NCCL\'s IB transport cannot register its buffers'
           % _human_bytes(MEMLOCK_NEEDED_BYTES) if severity == 'error' else
           'enough for the benchmark, but NCCL, UCX and MPI register more as jobs grow; registrations beyond '
           'it fail with ENOMEM')
    return [finding(
        F.HOST_MEMLOCK_LIMITED, host, 'memlock', evidence,
        'a job started like the benchmark may lock %s of memory (soft RLIMIT_MEMLOCK), %s.%s'
        % (_human_bytes(soft), why, stale), severity=severity)]


def _memlock_services(host, memlock):
    """What systemd gives the services it starts: systemd-system.conf(5) DefaultLimitMEMLOCK= sets
    the default of every unit without LimitMEMLOCK=, read from system.conf then the system.conf.d
    drop-ins (the last assignment wins); slurmd is such a service and its jobs inherit its limits.
    No assignment at all: the compiled-in default, not read here, so nothing is said."""
    services = (memlock.get('systemd') or [])[-1:]
    if not (services and isinstance(services[0].get('soft'), int) and services[0]['soft'] < MEMLOCK_NEEDED_BYTES):
        return []
    entry = services[0]
    return [finding(
        F.HOST_MEMLOCK_LIMITED, host, 'memlock (services)',
        {'soft': entry['soft'], 'hard': entry.get('hard'), 'value': entry.get('value'), 'file': entry.get('file'),
         'needed_bytes': MEMLOCK_NEEDED_BYTES},
        'DefaultLimitMEMLOCK=%s in %s limits the locked memory of services to %s, below the %s one ib_write_bw of '
        'the benchmark registers: services without LimitMEMLOCK= in their unit, slurmd among them, and the jobs '
        'they start (which inherit the limit) fail ibv_reg_mr with ENOMEM ("Couldn\'t allocate MR")'
        % (entry.get('value'), entry.get('file'), _human_bytes(entry['soft']), _human_bytes(MEMLOCK_NEEDED_BYTES)),
        # On the node's services, a place no benchmark path holds: ib_write_bw runs under the login
        # limit (the other HOST_MEMLOCK_LIMITED), so this one explains none of its failures.
        severity='error', at=[('services', host)])]


def _modules_lost(host, gdr, facts):
    """Modules loaded now that nothing loads at the next boot."""
    loaded = set(facts.get('modules_loaded') or [])
    persistent = facts.get('modules_persistent') or {}
    judged = list(PEER_MODULES)
    if not (gdr.get('ofed') or {}).get('version'):
        judged += list(RDMA_USER_MODULES)
    lost = [name for name in judged if name in loaded and name not in persistent]
    if not lost:
        return []
    peer = [name for name in lost if name in PEER_MODULES]
    return [finding(
        F.HOST_MODULES_NOT_PERSISTENT, host, 'modules',
        {'not_persistent': lost, 'ofed': (gdr.get('ofed') or {}).get('version')},
        '%s loaded now, but no modules-load.d file, /etc/modules or rdma-core file lists %s: after the next '
        'reboot %s not loaded%s' % (', '.join(lost), 'it' if len(lost) == 1 else 'them',
                                    'it is' if len(lost) == 1 else 'they are',
                                    ', and without %s GPUDirect RDMA is off (%s)' % (peer[0], F.GDR_PEERMEM_NOT_LOADED)
                                    if peer else ''))]


def host_findings(host, gdr):
    """CPU governor, locked-memory limit, modules lost at the next boot (gdr_facts ``host``);
    nothing when the facts predate it."""
    gdr = gdr or {}
    facts = gdr.get('host')
    if not facts:
        return []
    found = _governor(host, facts)
    # Locked memory and boot modules matter where verbs run: a node with an RDMA NIC.
    if not gdr.get('nics'):
        return found
    memlock = facts.get('memlock') or {}
    return found + _memlock_login(host, memlock) + _memlock_services(host, memlock) + _modules_lost(host, gdr, facts)

# ---------------------------------------------------------------------------- the rules the engine runs


@rule(produces=(F.IB_PORT_DOWN, F.IB_RATE_DEGRADED, F.IB_ERROR_COUNTERS, F.ROCE_NO_V2_GID), parts=('judged', 'roles'))
def port_states(fleet, _findings):
    return [item for host in sorted(fleet.judged) for item in ib_findings(host, fleet.judged[host].get('ib'), fleet.roles[host])]


@rule(produces=(F.HOST_NOTHING_TO_CHECK, F.GDR_NO_RDMA_NIC) + tuple(F.PEER_BLOCKER_CODES.values())
      + (F.GDR_ACS_REDIRECT, F.GPU_NIC_FAR, F.GDR_NOT_READY), parts=('judged', 'roles'))
def gpudirect(fleet, _findings):
    return [item for host in sorted(fleet.judged)
            for item in gdr_findings(host, fleet.judged[host].get('gdr'), fleet.judged[host].get('ib'), fleet.roles[host])]


@rule(produces=(F.MTU_MISMATCH,), parts=('judged', 'roles'))
def fleet_mtu(fleet, _findings):
    return mtu_findings(fleet.judged, fleet.roles)


@rule(produces=(F.HOST_CPU_GOVERNOR, F.HOST_MEMLOCK_LIMITED, F.HOST_MODULES_NOT_PERSISTENT), parts=('judged',))
def host_settings(fleet, _findings):
    return [item for name in sorted(fleet.judged) for item in host_findings(name, fleet.judged[name].get('gdr'))]


def peer_build_findings(host, gdr):
    """GDR_PEERMEM_DRIVER_MISMATCH per separate peer-memory module built for another driver than the loaded one
    (gdr facts ``peer_memory_build``, module_utils/_peermem.py): an error where the module is loaded (its calls go
    into a driver of another build) or where it is the file modprobe would load and no dma-buf path stands in;
    info where the comparison could not be made (what was not read is in the evidence)."""
    gdr = gdr or {}
    if not gdr.get('gpus') or not gdr.get('nics'):
        return []
    found = []
    for entry in gdr.get('peer_memory_build') or []:
        if not isinstance(entry, dict) or entry.get('state') not in ('mismatch', 'unknown'):
            continue
        evidence = dict((key, entry.get(key)) for key in (
            'loaded', 'loaded_version', 'driver_version', 'driver_source', 'file', 'file_state', 'file_version',
            'state'))
        if entry['state'] == 'unknown':
            found.append(finding(F.GDR_PEERMEM_DRIVER_MISMATCH, host, entry.get('module'), evidence,
                                 'whether %s is built for the loaded driver is unknown: %s' % (entry.get('module'), entry.get('why')),
                                 severity='info', at=[('peer_memory', host)]))
            continue
        standing_in = not entry.get('loaded') and dmabuf_stands_in('nvidia', gdr.get('dmabuf'))
        found.append(finding(
            F.GDR_PEERMEM_DRIVER_MISMATCH, host, entry.get('module'), evidence,
            '%s -> %s%s' % (entry.get('why'),
                            'NCCL registers GPU memory through a peer-memory client built for another driver'
                            if entry.get('loaded') else 'modprobe %s fails (or loads a module of another build), so NCCL '
                            'gets no peer-memory client' % entry.get('module'),
                            '; the dma-buf path can stand in' if standing_in else ''),
            severity='warning' if standing_in else None,
            at=[('peer_memory', host)] if standing_in else [('node', host)]))
    return found


@rule(produces=(F.GDR_PEERMEM_DRIVER_MISMATCH,), parts=('judged',))
def peer_memory_build(fleet, _findings):
    return [item for host in sorted(fleet.judged) for item in peer_build_findings(host, fleet.judged[host].get('gdr'))]
