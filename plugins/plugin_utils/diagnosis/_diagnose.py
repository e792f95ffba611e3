# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Diagnosis: pure rules over every host's facts and the benchmark results -> findings.

Bottom-up, the order in which a slow cross-node collective is debugged: the IB layer (ports, rates, counters, MTU, RoCE GIDs), then
IB+GPU (peer memory and why, ACS, NUMA), then what the benchmarks measured (pairs, GPU vs
host memory, the collective). A finding (docs/report.md, findings[]): code, layer, severity, host, subject,
evidence, cause, remedy. A higher-layer finding that a lower-layer one on the same host
explains gets ``explained_by`` (that finding's id): the report shows the roots, each with
the symptoms it causes, not twenty symptoms.
"""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import LAYERS, finding
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._collective import HEALTHY_RATIO, gpu_interconnect, intra_node
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import BEYOND_GDR_LEVEL, DEFAULT_GDR_LEVEL, PEER_PATHS, natural_key, peer_verdict
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import ERROR_COUNTERS
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pci import DISTANCE_CLASSES
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # what role each HCA plays
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._fleet import fleet_findings
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._search_findings import search_findings
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._fabric import fabric_findings, routes as fabric_routes  # fabric beyond the node
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._roce_rules import roce_findings  # RoCE lossless
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._pcie_rules import iommu_findings, pcie_findings  # PCIe links, IOMMU

# NCCL_NET_GDR_LEVEL default (PXB, module_utils/_gdr.py): a GPU farther from its NIC than this is not used for GDR.
FAR = BEYOND_GDR_LEVEL


# ---------------------------------------------------------------------------- IB layer

def ib_findings(host, ib, role_of=None):
    """Port findings of one node; ``role_of``: module_utils/_rails.py roles() of the node (from
    ``ib`` alone when not given: no GPU affinity, every device a compute rail)."""
    found = []
    role_of = role_of if role_of is not None else _rails.roles(ib)
    for device in (ib or {}).get('devices') or []:
        ports = device.get('ports') or []
        for port in ports:
            subject = '%s/%s' % (device['name'], port.get('port'))
            if port.get('state') != 'ACTIVE':
                why = ('no link partner (cable, transceiver or switch port)' if port.get('phys_state') == 'Polling'
                       else 'the link is down or disabled')
                # A compute rail down is a fault; the second port of a storage or management card is often
                # left uncabled by design and carries no collective: said, as info.
                rail = _rails.is_compute(role_of, device['name'])
                mine = role_of.get(device['name']) or {}
                found.append(finding(
                    F.IB_PORT_DOWN, host, subject,
                    {'state': port.get('state'), 'phys_state': port.get('phys_state'), 'role': mine.get('role') or _rails.COMPUTE},
                    'port is %s, physical state %s: %s%s' % (
                        port.get('state'), port.get('phys_state'), why, '' if rail else
                        '; it is a %s port (%s), not a compute rail: no collective goes through it' % (mine.get('role'), mine.get('why'))),
                    severity=None if rail else 'info', device=device['name'], at=[('hca', host, device['name'])]))
                continue
            # Peers of a port: the node's other ACTIVE ports of its model and role on its link layer
            # (_rails.roles): a storage card's 100 GbE ports are not slow next to a 200 GbE one of another
            # model. A 1X InfiniBand link is a fault in any role (a 4X link with lanes lost); on Ethernet, mlx5
            # reports single-lane 25/50/100GbE as 1X (drivers/infiniband/hw/mlx5/main.c translate_eth_*_proto_oper:
            # 25GBASE-CR -> IB_WIDTH_1X), so there only the rate against its peers tells.
            mine = role_of.get(device['name']) or {}
            group = (_rails.model(device), mine.get('role'), port.get('link_layer'))
            others = [p.get('rate_gbps') for d in (ib or {}).get('devices') or [] for p in d.get('ports') or []
                      if p is not port and p.get('state') == 'ACTIVE' and p.get('rate_gbps')
                      and (_rails.model(d), (role_of.get(d['name']) or {}).get('role'), p.get('link_layer')) == group]
            best = max(others) if others else None
            lanes_lost = port.get('width') == '1X' and port.get('link_layer') != 'Ethernet'
            if lanes_lost or (best and port.get('rate_gbps') and port['rate_gbps'] < best):
                # sysfs's rate names the width already ('100 Gb/sec (1X NDR)', drivers/infiniband/core/sysfs.c
                # rate_show): said once.
                trained = port.get('rate') or 'an unknown rate'
                if port.get('width') and port['width'] not in trained:
                    trained = '%s (%s)' % (trained, port['width'])
                found.append(finding(
                    F.IB_RATE_DEGRADED, host, subject,
                    {'rate': port.get('rate'), 'width': port.get('width'), 'others_gbps': best, 'role': mine.get('role'),
                     'model': list(group[0]) if group[0] else None},
                    'the link trained at %s%s: every test and every ring through it runs at this rate' % (
                        trained,
                        ', below the node\'s other %s ports of its model and role (%s, %s Gb/s)' % (
                            port.get('link_layer'), mine.get('role') or '?', best) if best and port.get('rate_gbps')
                        and port['rate_gbps'] < best else ', on a single lane'),
                    at=[('hca', host, device['name'])]))
            counters = dict((k, v) for k, v in (port.get('counters') or {}).items() if k in ERROR_COUNTERS and v)
            if counters or port.get('counters_saturated'):
                found.append(finding(
                    F.IB_ERROR_COUNTERS, host, subject,
                    {'counters': counters, 'saturated': port.get('counters_saturated') or []},
                    'the port has counted link errors since the counters were last cleared%s' % (
                        ' (some saturated: the real count is unknown)' if port.get('counters_saturated') else ''),
                    at=[('hca', host, device['name'])], path=[('hca', host, device['name'])]))
            if port.get('link_layer') == 'Ethernet':
                types = [g.get('type') for g in port.get('gids') or []]
                if 'RoCE v2' not in types:
                    # On a storage or management port no collective goes: said, not an error.
                    found.append(finding(
                        F.ROCE_NO_V2_GID, host, subject, {'gid_types': types, 'role': mine.get('role')},
                        'no RoCE v2 GID on the port (no IP address on its netdev, or RoCE v2 disabled): %s' % (
                            'NCCL cannot pick a routable GID (NCCL_IB_GID_INDEX)' if _rails.is_compute(role_of, device['name'])
                            else 'RDMA over it cannot be routed; it is a %s port (%s), not a compute rail' % (
                                mine.get('role'), mine.get('why'))),
                        severity=None if _rails.is_compute(role_of, device['name']) else 'info',
                        at=[('hca', host, device['name'])]))
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


def gdr_findings(host, gdr, ib=None, role_of=None):
    """``role_of``: module_utils/_rails.py roles() of the node (from ``ib`` and ``gdr`` when not given)."""
    found = []
    gdr = gdr or {}
    kernel, ofed = gdr.get('kernel') or {}, gdr.get('ofed') or {}
    dmabuf = (gdr.get('dmabuf') or {}).get('possible')
    devices = (ib or {}).get('devices') or []
    if not gdr.get('gpus') and not gdr.get('nics') and not devices:
        # Fail closed: a node where nothing of the GPU fabric was found was not validated, it is
        # not "ok" (a container that does not see /sys, a driver not loaded, the wrong inventory).
        found.append(finding(F.HOST_NOTHING_TO_CHECK, host, 'node',
                             {'gpus': 0, 'rdma_devices': 0, 'reasons': gdr.get('reasons') or []},
                             'no GPU of a supported vendor and no RDMA device were found on %s, so nothing of the GPU '
                             'fabric could be checked (GPU and HCA drivers not loaded, a container or VM that does not '
                             'see the devices or /sys, or a host that is not a GPU node)' % host))
        return found
    if gdr.get('gpus') and not gdr.get('nics') and not devices:
        found.append(finding(F.GDR_NO_RDMA_NIC, host, 'node',
                             {'gpus': len(gdr['gpus']), 'rdma_devices': 0, 'nccl_path': 'socket'},
                             '%d GPU(s) but no RDMA device (/sys/class/infiniband is empty): NCCL has no IB/RoCE '
                             'transport and uses %s between nodes; GPUDirect RDMA is impossible'
                             % (len(gdr['gpus']), _PATH_WORDS['socket'])))
        return found
    if not gdr.get('gpus') or not gdr.get('nics'):
        return found
    path_now = gpu_net_path(gdr)
    for vendor, path in sorted(((gdr.get('peer_memory') or {}).get('paths') or {}).items()):
        # Which root, in which words, and whether dma-buf stands in: the facts' own decision; its
        # code the registry's (the node names what blocks, never a finding code).
        verdict = peer_verdict(vendor, path, kernel, ofed, gdr.get('dmabuf'))
        if verdict is None:
            continue
        found.append(finding(F.PEER_BLOCKER_CODES[verdict['blocker']], host, vendor,
                             {'client': path.get('client'), 'module_loaded': path.get('module_loaded'),
                              'mm_kobj_exported': kernel.get('mm_kobj_exported'),
                              'have_mm_kobj_exported': ofed.get('have_mm_kobj_exported'), 'dmabuf_possible': dmabuf,
                              'nccl_path': path_now},
                             '%s; NCCL will use %s' % (' -> '.join(verdict['chain']), _PATH_WORDS[path_now]),
                             severity=None if verdict['blocking'] else 'warning', remedy=verdict['remedy'],
                             # Where dma-buf stands in, GPU memory still goes straight to the NIC: the missing
                             # peer-memory path is no test's cause, so it sits on the node's peer-memory set-up alone.
                             at=[('node', host)] if verdict['blocking'] else [('peer_memory', host)]))
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
    # A NIC that no GPU is near, while the node's other NICs each have one: it was seated in
    # the wrong slot (the other socket), and the GPU that should use it shares another NIC.
    near = dict((nic['name'], min([DISTANCE_CLASSES.index(p['distance']) for p in gdr.get('topology') or []
                                   if p['nic'] == nic['name'] and p.get('distance') in DISTANCE_CLASSES] or [len(DISTANCE_CLASSES)]))
                for nic in gdr.get('nics') or [])
    close = [name for name, level in near.items() if level < len(DISTANCE_CLASSES) and DISTANCE_CLASSES[level] not in FAR]
    # Only a NIC of the compute rails: a storage or management NIC is meant to sit elsewhere.
    # Which NIC is a rail is _rails.roles' decision (by model, which a fault elsewhere cannot
    # change; the rails' full rate only where the model is unknown).
    role_of = role_of if role_of is not None else _rails.roles(ib, gdr)
    if len(close) >= 2:
        for name, level in sorted(near.items(), key=lambda item: _rails.natural_key(item[0])):
            if name not in close and level < len(DISTANCE_CLASSES) and _rails.is_compute(role_of, name):
                found.append(finding(F.GPU_NIC_FAR, host, name, {'nearest_gpu_distance': DISTANCE_CLASSES[level]},
                                     '%s has no GPU nearer than %s while the node\'s other NICs sit under a GPU\'s PCIe switch: '
                                     'a GPU whose rail it is reaches it across the socket' % (name, DISTANCE_CLASSES[level]),
                                     # Every GPU-memory test over this NIC (GPU_NIC_FAR explains GPU-memory symptoms only).
                                     remedy='nic_slot', at=[('hca', host, name)]))
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


def host_findings(host, gdr):
    """CPU governor, locked-memory limit, modules lost at the next boot (gdr_facts ``host``);
    nothing when the facts predate it."""
    found = []
    facts = (gdr or {}).get('host')
    if not facts:
        return found
    governors = facts.get('cpu_governors') or {}
    slow = dict((name, count) for name, count in governors.items() if name != 'performance')
    if facts.get('cpufreq') and slow:
        found.append(finding(
            F.HOST_CPU_GOVERNOR, host, 'cpufreq', {'governors': governors},
            '%d of %d CPUs run %s, not performance: RDMA polling loops and NCCL proxy threads run on cores '
            'that are not at full clock; perftest says "Conflicting CPU frequency values" and "CPU Frequency is '
            'not max", and latencies read high'
            % (sum(slow.values()), sum(governors.values()), ', '.join(sorted(slow)))))
    # Locked memory and boot modules matter where verbs run: a node with an RDMA NIC.
    if not (gdr or {}).get('nics'):
        return found
    memlock = facts.get('memlock') or {}
    soft = memlock.get('soft')
    if isinstance(soft, int):
        configured = [e['file'] for e in memlock.get('limits_conf') or []
                      if e.get('type') in ('soft', '-') and e.get('bytes') == 'unlimited' and e.get('domain') != 'root']
        # Only the DefaultLimitMEMLOCK= systemd applies (the last one read) raises the limit.
        configured += [e['file'] for e in (memlock.get('systemd') or [])[-1:] if e.get('soft') == 'unlimited']
        evidence = {'soft': soft, 'hard': memlock.get('hard'), 'cap_ipc_lock': memlock.get('cap_ipc_lock'),
                    'needed_bytes': MEMLOCK_NEEDED_BYTES, 'configured_unlimited_in': sorted(set(configured))}
        stale = (' %s configure unlimited, but this process did not get it: limits apply to new logins, and to '
                 'services after systemctl daemon-reexec and a restart' % ', '.join(sorted(set(configured)))) if configured else ''
        if memlock.get('cap_ipc_lock'):
            # Root with CAP_IPC_LOCK is not held to the limit (ib_umem_get), so the benchmark run as
            # root is not either; what matters then is what other users' jobs get.
            if not configured:
                found.append(finding(
                    F.HOST_MEMLOCK_LIMITED, host, 'memlock', evidence,
                    'locked memory is limited to %s and no limits.conf entry or DefaultLimitMEMLOCK raises it: this '
                    'process has CAP_IPC_LOCK (root) and is exempt, but a job of another user gets this limit and its '
                    'ibv_reg_mr fails with ENOMEM beyond it' % _human_bytes(soft), severity='warning'))
        else:
            severity = 'error' if soft < MEMLOCK_NEEDED_BYTES else 'warning'
            why = ('below the %s one ib_write_bw of the benchmark registers (2 x 8 MiB messages): ibv_reg_mr fails with '
                   'ENOMEM ("Couldn\'t allocate MR"), and NCCL\'s IB transport cannot register its buffers'
                   % _human_bytes(MEMLOCK_NEEDED_BYTES) if severity == 'error' else
                   'enough for the benchmark, but NCCL, UCX and MPI register more as jobs grow; registrations beyond '
                   'it fail with ENOMEM')
            found.append(finding(
                F.HOST_MEMLOCK_LIMITED, host, 'memlock', evidence,
                'a job started like the benchmark may lock %s of memory (soft RLIMIT_MEMLOCK), %s.%s'
                % (_human_bytes(soft), why, stale), severity=severity))
    # What systemd gives the services it starts: systemd-system.conf(5) DefaultLimitMEMLOCK= sets
    # the default of every unit without LimitMEMLOCK=, read from system.conf then the system.conf.d
    # drop-ins (the last assignment wins); slurmd is such a service and its jobs inherit its limits.
    # No assignment at all: the compiled-in default, not read here, so nothing is said.
    services = (memlock.get('systemd') or [])[-1:]
    if services and isinstance(services[0].get('soft'), int) and services[0]['soft'] < MEMLOCK_NEEDED_BYTES:
        entry = services[0]
        found.append(finding(
            F.HOST_MEMLOCK_LIMITED, host, 'memlock (services)',
            {'soft': entry['soft'], 'hard': entry.get('hard'), 'value': entry.get('value'), 'file': entry.get('file'),
             'needed_bytes': MEMLOCK_NEEDED_BYTES},
            'DefaultLimitMEMLOCK=%s in %s limits the locked memory of services to %s, below the %s one ib_write_bw of '
            'the benchmark registers: services without LimitMEMLOCK= in their unit, slurmd among them, and the jobs '
            'they start (which inherit the limit) fail ibv_reg_mr with ENOMEM ("Couldn\'t allocate MR")'
            % (entry.get('value'), entry.get('file'), _human_bytes(entry['soft']), _human_bytes(MEMLOCK_NEEDED_BYTES)),
            # On the node's services, a place no benchmark path holds: ib_write_bw runs under the login
            # limit (the other HOST_MEMLOCK_LIMITED), so this one explains none of its failures.
            severity='error', at=[('services', host)]))
    loaded = set(facts.get('modules_loaded') or [])
    persistent = facts.get('modules_persistent') or {}
    judged = list(PEER_MODULES)
    if not ((gdr or {}).get('ofed') or {}).get('version'):
        judged += list(RDMA_USER_MODULES)
    lost = [name for name in judged if name in loaded and name not in persistent]
    if lost:
        peer = [name for name in lost if name in PEER_MODULES]
        found.append(finding(
            F.HOST_MODULES_NOT_PERSISTENT, host, 'modules',
            {'not_persistent': lost, 'ofed': ((gdr or {}).get('ofed') or {}).get('version')},
            '%s loaded now, but no modules-load.d file, /etc/modules or rdma-core file lists %s: after the next '
            'reboot %s not loaded%s' % (', '.join(lost), 'it' if len(lost) == 1 else 'them',
                                        'it is' if len(lost) == 1 else 'they are',
                                        ', and without %s GPUDirect RDMA is off (%s)' % (peer[0], F.GDR_PEERMEM_NOT_LOADED)
                                        if peer else '')))
    return found


# ---------------------------------------------------------------------------- measured

def pair_subject(pair):
    return '%s->%s rail %s %s' % (pair['server'], pair['client'], pair.get('rail'), pair.get('memory'))


def pair_path(pair):
    """The places a pair's test went through (_bench.report()'s entry): both nodes, the HCA of
    its rail at either end and, for host memory, that HCA's way to host memory (('hca_host', host,
    hca): the PCIe bridges above it, _pcie_rules._places), for GPU memory, each side's GPU and its
    PCIe path to that HCA (a bridge on it sits on that ('gpu_nic', ...) place). What the entry does
    not name is not on the path (fail closed: nothing there explains it)."""
    path = []
    for side in ('server', 'client'):
        host, hca, gpu = pair.get(side), pair.get('%s_hca' % side), pair.get('%s_gpu' % side)
        if not host:
            continue
        path.append(('node', host))
        if hca:
            path.append(('hca', host, hca))
            if pair.get('memory') != 'gpu':
                path.append(('hca_host', host, hca))
        if pair.get('memory') == 'gpu' and gpu:
            path.append(('gpu', host, gpu))
            if hca:
                path.append(('gpu_nic', host, gpu, hca))
    return path


def bench_findings(bench):
    found = []
    # Fail closed: what the benchmark could not test is said, with why (no HCA, one node, no perftest).
    if (bench or {}).get('skipped'):
        # The run, and every node it left out (diagnose() adds the nodes it knows).
        found.append(finding(F.BENCH_NOT_RUN, None, 'pairwise',
                             {'skipped': bench['skipped'], 'excluded': bench.get('excluded') or {}},
                             'the pairwise benchmark did not run: %s' % bench['skipped'], test=bench.get('test') or 'ib_write_bw',
                             path=[('run',)] + [('node', host) for host in sorted(bench.get('excluded') or {})]))
    for host, why in sorted(((bench or {}).get('excluded') or {}).items()):
        # The node, and its HCAs where diagnose() knows them.
        found.append(finding(F.BENCH_NODE_NOT_TESTED, host, 'node', {'reason': why},
                             '%s was left out of the pairwise benchmark: %s' % (host, why), path=[('node', host)]))
    for host, entry in sorted(((bench or {}).get('records_malformed') or {}).items(), key=lambda item: natural_key(item[0])):
        # Fail closed: a record that could not be placed was dropped, and the tests it held were not judged.
        entry = entry if isinstance(entry, dict) else {}
        found.append(finding(F.BENCH_RECORDS_MALFORMED, None, 'pairwise',
                             {'node': host, 'source': entry.get('source'), 'dropped': entry.get('dropped'),
                              'records': list(entry.get('records') or [])[:_bench.MALFORMED_NAMED]},
                             '%s record(s) of %s could not be judged and were dropped (%s): %s' % (
                                 entry.get('dropped'), host, entry.get('source'), '; '.join(entry.get('records') or [])),
                             path=[('run',), ('node', host)]))
    host_ok = set((p['server'], p['client'], p.get('rail')) for p in (bench or {}).get('pairs') or []
                  if p.get('memory') == 'host' and p.get('verdict') == 'ok')
    broken = []
    for pair in (bench or {}).get('pairs') or []:
        if pair.get('verdict') == 'ok':
            continue
        cause_of = _bench.not_reached(pair)
        if cause_of is not None:
            # Never reached the hardware (its beacon port taken, perftest missing): the run's failure, said
            # once below; no device verdict follows from it.
            broken.append((pair, cause_of))
            continue
        subject = pair_subject(pair)
        gpu_low = pair.get('memory') == 'gpu' and pair.get('status') == 'ok' and pair.get('gpu_vs_host') is not None \
            and pair.get('gpu_vs_host') < _bench.thresholds(bench.get('thresholds'))['gpu_ratio']
        code = F.BENCH_PAIR_FAILED if pair.get('verdict') == 'failed' else (F.BENCH_GPU_MEMORY_LOW if gpu_low else F.BENCH_PAIR_LOW)
        if code == F.BENCH_PAIR_FAILED and pair.get('memory') == 'gpu' and (pair['server'], pair['client'], pair.get('rail')) in host_ok:
            # The link works (host memory passed on the same pair and rail): GPU memory itself could not be
            # used, e.g. ibv_reg_mr refused without a peer-memory client - the IB+GPU layer's symptom.
            code = F.BENCH_GPU_MEMORY_FAILED
        severity, cause = 'error', '; '.join(pair.get('reasons') or [])
        if gpu_low and pair.get('gpu_distance') in FAR:
            # Topology, not a fault of the pair: no GPU sits near this HCA (a storage NIC, or a rail wired to
            # the other socket). NCCL does not use GPUDirect RDMA that far by default (NCCL_NET_GDR_LEVEL
            # PXB), so jobs never see this; a compute-rate NIC without a near GPU is GPU_NIC_FAR, once per node.
            severity = 'info'
            cause += ('; the nearest GPU of this HCA is %s away, so GPU memory through it crosses the socket'
                      % pair['gpu_distance'])
        found.append(finding(code, None, subject,
                             {'bw_avg_gbps': pair.get('bw_avg_gbps'), 'port_rate_gbps': pair.get('port_rate_gbps'),
                              'gpu_vs_host': pair.get('gpu_vs_host'), 'gpu_distance': pair.get('gpu_distance'),
                              'memory': pair.get('memory'), 'failure': pair.get('failure'),
                              'server_failure': pair.get('server_failure'),
                              # Which end's failure made the test fail (what a root must explain: F.explains).
                              'failed_side': _bench.failure_cause(pair) if pair.get('verdict') == 'failed' else None},
                             cause, severity=severity, remedy=None if severity == 'error' else 'no_gpu_near',
                             path=pair_path(pair)))
        found[-1]['hosts'] = [pair['server'], pair['client']]
    if broken:
        found.append(_run_broken(broken))
    # One finding per HCA whose counters rose, its tests in evidence: a port flapping through the
    # whole benchmark is one fault, not one per test.
    rises = {}
    for rise in (bench or {}).get('counters') or []:
        rises.setdefault((rise['host'], rise['hca']), []).append(rise)
    for (host, hca), items in sorted(rises.items(), key=lambda item: (item[0][0], natural_key(item[0][1]))):
        total = {}
        for rise in items:
            for name, value in (rise.get('increase') or {}).items():
                total[name] = total.get(name, 0) + (value or 0)
        tests = [dict((k, rise.get(k)) for k in ('pair', 'rail', 'memory', 'round', 'increase', 'verdicts')) for rise in items]
        found.append(finding(F.IB_ERRORS_UNDER_LOAD, host, hca, {'increase': total, 'tests': tests},
                             'error counters of %s rose during %d test(s) of the benchmark (%s): %s' % (
                                 hca, len(items), ', '.join(sorted(set(r['pair'] for r in items)))[:300],
                                 ', '.join('%s +%d' % kv for kv in sorted(total.items()))),
                             hca=hca, at=[('hca', host, hca)], path=[('hca', host, hca)]))
    return found


# How many causes a BENCH_RUN_BROKEN names in its text (all are in its evidence, up to RUN_BROKEN_CAUSES).
_CAUSES_SAID = 6
RUN_BROKEN_CAUSES = 100


def _run_broken(broken):
    """One BENCH_RUN_BROKEN for the pair tests that never reached the hardware (``broken``: [(pair,
    _bench.not_reached(pair))]): each cause (a node's message, as the tool or perftest_run said it) with its nodes
    and tests; on the run, not on a node (nothing was measured of any node)."""
    causes = {}
    for pair, cause in broken:
        # Each end's own cause where both could not set up (both beacons' ports taken), not only the one that decided.
        ends = [(pair.get(side), failure) for side, failure in (('server', pair.get('server_failure')), ('client', pair.get('failure')))
                if _bench.never_reached(failure)]
        for host, failure in ends or [(cause['host'], cause)]:
            causes.setdefault((host, failure.get('kind'), failure.get('message') or ''), set()).add(pair_subject(pair))
    listed = sorted(causes.items(), key=lambda item: (natural_key(item[0][0] or ''), item[0][1], item[0][2]))
    nodes = sorted(set(host for pair, _c in broken for host in (pair.get('server'), pair.get('client')) if host), key=natural_key)
    failing = sorted(set(host for (host, _k, _m) in causes if host), key=natural_key)
    said = '; '.join('%s: %s: %s' % (host or '?', kind, message) for (host, kind, message), _t in listed[:_CAUSES_SAID])
    if len(listed) > _CAUSES_SAID:
        said += '; and %d more cause(s) in the evidence' % (len(listed) - _CAUSES_SAID)
    return finding(F.BENCH_RUN_BROKEN, None, 'pairwise',
                   {'tests': len(broken), 'nodes': nodes, 'failed_on': failing, 'causes_total': len(listed),
                    'causes': [{'host': host, 'kind': kind, 'message': message, 'tests': len(tests),
                                'subjects': sorted(tests)[:20]} for (host, kind, message), tests in listed[:RUN_BROKEN_CAUSES]]},
                   '%d pair test(s) over %s never reached the hardware: the benchmark could not set them up on %s (%s). '
                   'They say nothing of any device; those pairs were not tested' % (
                       len(broken), ', '.join(nodes[:20]) + (' and %d more' % (len(nodes) - 20) if len(nodes) > 20 else ''),
                       ', '.join(failing[:20]) + (' and %d more' % (len(failing) - 20) if len(failing) > 20 else ''), said),
                   path=[('run',)] + [('node', host) for host in nodes])


# NCCL variables that forbid a transport between GPUs of one node (NCCL docs, Environment Variables):
# NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL=LOC (or 0: P2P only within one GPU), NCCL_SHM_DISABLE=1.
_NO_P2P_VALUES = {'NCCL_P2P_DISABLE': ('1',), 'NCCL_P2P_LEVEL': ('LOC', '0'), 'NCCL_SHM_DISABLE': ('1',)}
# NVIDIA/nccl#1676: up to this release NCCL needs the memory_peers client of nv_peer_mem.
NCCL_PEERMEM_CLIENT_ONLY = (2, 22, 3)


def _variables(*envs):
    """{name: value} of the variables that forbid P2P or SHM, from the run's environment and what NCCL says it saw."""
    found = {}
    for env in envs:
        for name, values in _NO_P2P_VALUES.items():
            value = str((env or {}).get(name, '')).strip().upper()
            if value in values and name not in found:
                found[name] = (env or {}).get(name)
    return found


def _gpus_not_p2p(host, intra, interconnect, envs, subject='collective'):
    """COLLECTIVE_GPUS_NOT_P2P for one host's connections between its own GPUs, or None.

    A network transport between two GPUs of one node is never right; host memory (SHM) is NCCL's
    normal choice between GPUs that share no P2P path (across CPU sockets), not between GPUs that
    NVLink joins."""
    kinds = intra.get('kinds') or {}
    if not kinds or intra.get('direct'):
        return None
    nvlink = bool(interconnect and interconnect.get('kind') == 'NVLink')
    if 'NET' not in kinds and not nvlink:
        return None
    variables = _variables(*envs)
    used = ', '.join(intra.get('via') or sorted(kinds))
    count = sum(kinds.values())
    joined = ('their NVLink (%s)' % interconnect['basis']) if nvlink else 'peer-to-peer'
    if variables:
        why = '%s %s set in the run\'s environment, so NCCL may not use %s between them' % (
            ' and '.join('%s=%s' % item for item in sorted(variables.items())), 'is' if len(variables) == 1 else 'are',
            'peer-to-peer or shared memory' if 'NCCL_SHM_DISABLE' in variables else 'peer-to-peer')
    else:
        why = ('nothing in the run\'s environment forbids P2P: NCCL found peer-to-peer between these GPUs impossible (PCIe ACS '
               'redirecting P2P to the root complex, an IOMMU translating DMA, GPUs behind different root complexes, or '
               'processes that cannot share CUDA IPC)')
    return finding(F.COLLECTIVE_GPUS_NOT_P2P, host, subject,
                   {'connections': kinds, 'via': intra.get('via'), 'variables': variables,
                    'interconnect': interconnect},
                   'the GPUs of %s talked to each other via %s (%d connection(s)), not peer-to-peer over %s: %s'
                   % (host, used, count, joined, why),
                   remedy='env' if variables else None, variables=', '.join(sorted(variables)) or '-',
                   at=[('gpus', host)], path=[('node', host), ('gpus', host)])


def _local_collective_findings(local):
    """Per-node collectives (fabric_collective launcher local): each node against its GPUs' own
    interconnect (NCCL's topology of the run: NVLink), the given expectation, and its peers."""
    found = []
    local = local or {}
    for host, entry in sorted((local.get('hosts') or {}).items()):
        verdict = entry.get('verdict') or {}
        status = verdict.get('status')
        evidence = {'busbw_gbs': entry.get('busbw_gbs'), 'peer_median_gbs': entry.get('peer_median_gbs'),
                    'peer_ratio': entry.get('peer_ratio'), 'expected_gbs': verdict.get('expected_gbs', local.get('expected_gbs')),
                    'expected_basis': verdict.get('basis'), 'failure': entry.get('failure'),
                    'wrong_total': entry.get('wrong_total'), 'intra': entry.get('intra')}
        subject = entry.get('benchmark') or 'collective'
        path = [('node', host), ('gpus', host)]
        if status in ('failed', 'corrupt'):
            code = F.COLLECTIVE_DATA_CORRUPTION if status == 'corrupt' else F.COLLECTIVE_FAILED
            found.append(finding(code, host, subject, evidence,
                                 'the collective over the GPUs of %s: %s' % (host, '; '.join(verdict.get('reasons') or [status])),
                                 remedy='missing_binary' if (entry.get('failure') or {}).get('kind') in ('missing_binary', 'not_run')
                                 else 'node', path=path))
            continue
        own = (entry.get('intra') or {})
        # The run was over this node only: its connections are between its own GPUs, whatever NCCL's host name.
        intra = next((own[name] for name in sorted(own)), {}) if len(own) == 1 else own.get(host) or {}
        root = _gpus_not_p2p(host, intra, entry.get('interconnect'), ((entry.get('env') or {}),
                             ((entry.get('transport') or {}).get('env') or {})), subject)
        if root:
            found.append(root)
        if status in ('warning', 'low'):
            found.append(finding(F.COLLECTIVE_BUSBW_LOW, host, subject, evidence,
                                 '; '.join(verdict.get('reasons') or []) + (
                                     ' (%s)' % verdict['basis'] if verdict.get('basis') else ''),
                                 severity='warning' if status == 'warning' else 'error', remedy='node', path=path))
        if entry.get('slow'):
            mine = ', '.join(intra.get('via') or []) or 'unknown'
            peers = sorted(set(via for other, item in (local.get('hosts') or {}).items() if other != host
                               for found_intra in (item.get('intra') or {}).values() for via in found_intra.get('via') or []))
            differs = ('its GPUs talked via %s, its peers\' via %s' % (mine, ', '.join(peers))
                       if peers and mine != 'unknown' and set(intra.get('via') or []) != set(peers) else
                       'NCCL\'s log shows the same transports as its peers\': the GPUs, their links or clocks differ')
            found.append(finding(F.COLLECTIVE_NODE_SLOW, host, subject, evidence,
                                 'busbw %.2f GB/s over the GPUs of %s is %.0f %% of the median of its peers (%.2f GB/s; '
                                 'below %.0f %% is slow): %s'
                                 % (entry.get('busbw_gbs') or 0, host, 100 * (entry.get('peer_ratio') or 0),
                                    entry.get('peer_median_gbs') or 0, 100 * local.get('healthy_ratio', HEALTHY_RATIO), differs),
                                 path=path))
    return found


def _nccl_release(versions):
    """(major, minor, patch) of the run's NCCL ('2.21.5+cuda12.4'), or None."""
    text = str((versions or {}).get('library_version') or '')
    parts = text.split('+', 1)[0].split('.')
    try:
        return tuple(int(part) for part in parts[:3]) if len(parts) >= 3 else None
    except ValueError:
        return None


def _run_host(name, nodes):
    """The inventory host a name of NCCL's log (gethostname cut at the first dot) stands for, or None."""
    if name in nodes:
        return name
    matches = [host for host in nodes if host.split('.')[0] == name]
    return matches[0] if len(matches) == 1 else None


def collective_findings(collective, nodes=None):
    found = []
    nodes = nodes or {}
    skipped = (collective or {}).get('skipped')
    if skipped:
        # Not a fault, but what could not be checked must be said (a mixed fleet, one node).
        found.append(finding(F.COLLECTIVE_NOT_RUN, None, 'collective', {'skipped': skipped},
                             'the collective benchmark did not run: %s' % skipped))
    fleet = (collective or {}).get('fleet') or {}
    verdict = fleet.get('verdict') or {}
    transport = fleet.get('transport') or {}
    run_hosts = [host for host in (_run_host(name, nodes) for name in fleet.get('hosts') or []) if host] or sorted(nodes)
    # A fleet run's path: every node of it, their GPUs and the HCAs NCCL used.
    hcas = [name.split(':', 1)[0] for name in transport.get('hcas') or []]
    path = [('node', host) for host in run_hosts] + [('gpus', host) for host in run_hosts] + [
        ('hca', host, hca) for host in run_hosts for hca in hcas]
    if verdict.get('status') in ('warning', 'low', 'corrupt', 'failed'):
        code = {'corrupt': F.COLLECTIVE_DATA_CORRUPTION, 'failed': F.COLLECTIVE_FAILED}.get(verdict['status'], F.COLLECTIVE_BUSBW_LOW)
        severity = 'warning' if verdict['status'] == 'warning' else 'error'
        found.append(finding(code, None, fleet.get('benchmark') or 'collective',
                             {'busbw_gbs': verdict.get('busbw_gbs'), 'expected_gbs': verdict.get('expected_gbs'),
                              'ratio': verdict.get('ratio'), 'wrong_total': fleet.get('wrong_total'),
                              'gdr': transport.get('gdr'), 'net': transport.get('net')},
                             '; '.join(verdict.get('reasons') or []), severity=severity, path=path))
    ready = dict((host, (node.get('gdr') or {}).get('gdr_ready')) for host, node in nodes.items()
                 if (node.get('gdr') or {}).get('gpus'))
    gdr_via = None
    if transport.get('gdr') is True:
        # NCCL registers GPU buffers with dma-buf where both the GPU (init.cc 'DMA-BUF is available on GPU
        # device') and the NIC support it, else through the peer-memory client (src/transport/net_ib.cc).
        gdr_via = 'dma-buf' if transport.get('dmabuf_available') else 'peer memory'
    release = _nccl_release(fleet.get('versions'))
    trapped = []
    if transport.get('net') == 'IB' and release and release <= NCCL_PEERMEM_CLIENT_ONLY:
        for host in run_hosts:
            paths = (((nodes.get(host) or {}).get('gdr') or {}).get('peer_memory') or {}).get('paths') or {}
            nvidia = paths.get('nvidia') or {}
            if nvidia.get('detected') and str(nvidia.get('evidence') or '').startswith('/sys/module/'):
                trapped.append(host)
                found.append(finding(
                    F.COLLECTIVE_NCCL_PEERMEM_NAME, host, 'nccl %s' % '.'.join(str(part) for part in release),
                    {'nccl': (fleet.get('versions') or {}).get('library_version'), 'peer_memory': nvidia.get('evidence'),
                     'module': nvidia.get('module_loaded'), 'gdr_in_run': transport.get('gdr')},
                    'NCCL %s looks for the memory_peers client of nv_peer_mem (/sys/kernel/mm/memory_peers/nv_mem/version) '
                    'and does not know %s, which registers none on %s (%s only): it turns GPUDirect RDMA off there and every '
                    'message is copied through host memory' % (
                        (fleet.get('versions') or {}).get('library_version'), nvidia.get('module_loaded') or 'nvidia_peermem',
                        host, nvidia.get('evidence')),
                    at=[('node', host)]))
    if transport.get('net') == 'IB' and transport.get('gdr') is False and ready and (all(ready.values()) or trapped):
        # Every node's facts say GPUDirect RDMA works, yet the library did not use it: the job's
        # settings or environment, not the nodes (NCCL_NET_GDR_LEVEL below the GPU<->NIC distance,
        # a container without the peer-memory device files, NCCL_NET_GDR_READ/NCCL_IB_DISABLE set),
        # or a NCCL too old for the node's peer-memory module.
        found.append(finding(F.COLLECTIVE_GDR_NOT_USED, None, 'transport',
                             {'evidence': transport.get('evidence'), 'gdr_ready': ready, 'hcas': transport.get('hcas')},
                             'the collective ran over IB without GPUDirect RDMA (NCCL: "GPU Direct RDMA Disabled" for %s) '
                             'although gdr_facts finds every node GPUDirect-RDMA ready: data went through host memory'
                             % (', '.join(hcas) or 'its HCAs'), path=path))
    rdma_hosts = [host for host in run_hosts if ((nodes.get(host) or {}).get('ib') or {}).get('devices')]
    if transport.get('net') == 'Socket' and fleet.get('hosts') and len(fleet['hosts']) > 1:
        unavailable = transport.get('ib_unavailable') or {}
        why = {'libibverbs': 'NCCL could not load libibverbs ("%s"): rdma-core\'s verbs library is missing where the job '
                             'runs (a container, a node without the OFED or rdma-core user space)',
               'no_device': 'NCCL found no RDMA device ("%s"): the job does not see /dev/infiniband (a container without the '
                            'devices) or NCCL_IB_HCA names none of the HCAs',
               'disabled': 'NCCL_IB_DISABLE=1 is set in the job\'s environment (%s)'}.get(unavailable.get('reason'))
        found.append(finding(F.COLLECTIVE_SOCKET_TRANSPORT, None, 'transport',
                             {'evidence': transport.get('evidence'), 'ib_unavailable': unavailable or None,
                              'rdma_hosts': rdma_hosts},
                             'NCCL used TCP sockets across nodes, not RDMA%s' % (
                                 (': ' + why % unavailable.get('line')) if why else ''),
                             remedy=unavailable.get('reason') if unavailable.get('reason') in ('libibverbs', 'disabled') else None,
                             # A run whose nodes gave no facts still sits on the run (never nowhere).
                             at=[('node', host) for host in rdma_hosts or run_hosts] or [('run',)], path=path))
    # GPUs of one node that did not talk peer-to-peer in the fleet run (its connection lines by host).
    interconnects = dict((name, _collective_interconnect(transport, name)) for name in (transport.get('intra_by_host') or {}))
    for name, intra in sorted(intra_node(transport).items()):
        host = _run_host(name, nodes)
        if host is None:
            continue
        root = _gpus_not_p2p(host, intra, interconnects.get(name), (transport.get('env') or {},), fleet.get('benchmark') or 'collective')
        if root:
            found.append(root)
    if gdr_via and fleet:
        found.append(finding(F.COLLECTIVE_GDR_PATH, None, 'transport', {'gdr_via': gdr_via, 'hcas': transport.get('hcas')},
                             'the collective used GPUDirect RDMA through %s' % gdr_via))
    found.extend(_local_collective_findings((collective or {}).get('nodes')))
    found.extend(search_findings((collective or {}).get('search')))
    return found


def _collective_interconnect(transport, name):
    topology = ((transport or {}).get('topology') or {}).get(name)
    return gpu_interconnect({'topology': {name: topology}}) if topology else None


# ---------------------------------------------------------------------------- roots and symptoms

# Which codes a root explains, and when: the registry's (plugin_utils/diagnosis/_findings.py); where: F.on_path.
EXPLAINS = F.EXPLAINS
# A pair's symptoms (bench_findings), judged again per device when no root on their path explains them.
PAIR_SYMPTOMS = (F.BENCH_PAIR_FAILED, F.BENCH_PAIR_LOW, F.BENCH_GPU_MEMORY_LOW, F.BENCH_GPU_MEMORY_FAILED)


def link_causes(findings):
    """Set explained_by on every symptom that a root on its path explains; roots keep None.

    A root explains a symptom when the registry says its code explains the symptom's
    (F.explains) and one of the places it sits on (``at``) is on the places the symptom's tests
    went through (``path``, F.on_path): a node-wide root of either end, the HCA of the test's
    rail at either end, the GPU<->NIC path of the GPU memory used, a link on its route. A root
    without places explains nothing and a symptom without a path is explained by nothing (fail
    closed): a symptom is never pinned on a device it did not touch. Where several roots are on
    the path, the one the symptom's own evidence names wins (F.named: GPUDirect RDMA not used ->
    the GDR chain, not a slow port), then a root whose own place is on the path before a node-wide
    one, then the lowest layer, then the order given. A failed pair is judged by the failure that
    made it fail (evidence.failed_side, _bench.failure_cause): GPU memory its end could not register
    is that end's peer-memory chain, never its peer's (F.explains with the root's host). A symptom
    explained by something that is itself explained points at that root.
    """
    order = dict((layer, index) for index, layer in enumerate(LAYERS))
    roots = {}
    for position, item in enumerate(findings):
        item['explained_by'] = None
        if item['code'] in EXPLAINS and item.get('at'):
            for code in EXPLAINS[item['code']]:
                roots.setdefault(code, []).append((position, item))
    for symptom in findings:
        if not symptom.get('path'):
            continue
        best = None
        for position, root in roots.get(symptom['code'], ()):
            if root is symptom or not F.explains(root['code'], symptom, root.get('host')) \
                    or not F.on_path(root['at'], symptom['path']):
                continue
            # A root whose own place is on the path before a node-wide one, whatever their layers (a port that
            # is down, or an HCA's PCIe link trained low, before the node's missing HCA, for a test through it).
            exact = any(place[0] != 'node' and list(place) in symptom['path'] for place in root['at'])
            rank = (not F.named(root['code'], symptom), not exact, order.get(root['layer'], len(order)), position)
            if best is None or rank < best[0]:
                best = (rank, root)
        if best:
            symptom['explained_by'] = best[1]['id']
    # Chains: a symptom explained by something that is itself explained points at the root.
    by_id = dict((f['id'], f) for f in findings)
    for item in findings:
        seen = set([item['id']])
        while item['explained_by'] and by_id.get(item['explained_by'], {}).get('explained_by') \
                and by_id[item['explained_by']]['explained_by'] not in seen:
            seen.add(item['explained_by'])
            item['explained_by'] = by_id[item['explained_by']]['explained_by']
    return findings


def collective_path(host, node, hcas=None, role_of=None):
    """The places a collective run went through on ``host``: the node, its GPUs' interconnect,
    each GPU and its PCIe path to its nearest NIC, and the HCAs (``hcas``: the names NCCL used,
    where the run says; else the node's compute rails, ``role_of``: module_utils/_rails.py roles()
    of the node, from the node when not given - a storage or management port carries no
    collective, so its fault explains none). For the culprit search's findings, and for the
    fleet run's symptoms (_diagnose.collective_findings)."""
    gdr, ib = (node or {}).get('gdr') or {}, (node or {}).get('ib') or {}
    names = [d.get('name') for d in ib.get('devices') or [] if isinstance(d, dict) and d.get('name')]
    role_of = role_of if role_of is not None else _rails.node_roles(node)
    used = [name for name in hcas or [] if name in names] or [name for name in names if _rails.is_compute(role_of, name)]
    path = [('node', host), ('gpus', host)] + [('hca', host, name) for name in sorted(set(used), key=natural_key)]
    for gpu in gdr.get('gpus') or []:
        if isinstance(gpu, dict) and gpu.get('name'):
            path.append(('gpu', host, gpu['name']))
            if gpu.get('nearest_nic') in used:
                path.append(('gpu_nic', host, gpu['name'], gpu['nearest_nic']))
    return path


def _with_routes(path, routes):
    """A pair's path with the fabric links it may cross (_fabric.routes): each end's cable, and the
    up-links of both leaves where the ends sit on different leaves."""
    ends = [routes.get((place[1], place[2])) for place in path or [] if place[0] == 'hca' and len(place) == 3]
    ends = [end for end in ends if end]
    extra = [end['cable'] for end in ends]
    if len(set(end['leaf'] for end in ends)) > 1:
        extra += [link for end in ends for link in end['uplinks']]
    return [tuple(place) for place in path] + extra


def complete_paths(findings, nodes, bench=None, collective=None, roles=None):
    """What a rule alone could not know of a symptom's path: the fabric links a pair crosses, the
    HCAs of a node left out of the mesh, the devices a culprit's collective ran through, every node
    of a run that did not run. ``roles``: {host: _rails.roles()} where the caller has them."""
    roles = roles or {}
    routes = fabric_routes(nodes)
    transport = (((collective or {}).get('fleet') or {}).get('transport')) or {}
    used = [str(name).split(':', 1)[0] for name in transport.get('hcas') or []]
    for item in findings:
        code, host = item['code'], item.get('host')
        if code in PAIR_SYMPTOMS + (F.FABRIC_SLOW_PAIR_PATH,) and item.get('path') and routes:
            item['path'] = F.places(_with_routes(item['path'], routes))
        elif code == F.BENCH_NODE_NOT_TESTED and host in nodes:
            item['path'] = F.places([tuple(p) for p in item.get('path') or []] + collective_path(host, nodes[host], role_of=roles.get(host))[2:])
        elif code in (F.COLLECTIVE_CULPRIT, F.COLLECTIVE_SUSPECT) and host:
            item['path'] = F.places(collective_path(host, nodes.get(host), used, roles.get(host)))
            if transport.get('gdr') is False and isinstance(item.get('evidence'), dict):
                # The run it was named in did not use GPUDirect RDMA (NCCL's INFO): a GDR root is preferred.
                item['evidence'] = dict(item['evidence'], gdr=False)
        elif code in (F.BENCH_NOT_RUN, F.COLLECTIVE_NOT_RUN) and not host:
            item['path'] = F.places([tuple(p) for p in item.get('path') or [('run',)]] + [('node', h) for h in sorted(nodes)])
    return findings


# Which place a device finding names first when two cover the same tests: the most specific.
_SPECIFIC = ('hca', 'gpu_nic', 'gpu', 'node')


def _device_words(place, rails):
    if place[0] == 'hca':
        return '%s of %s (rail %s)' % (place[2], place[1], ', '.join(str(r) for r in rails)) if rails else \
            '%s of %s' % (place[2], place[1])
    if place[0] == 'gpu_nic':
        return 'the PCIe path between %s and %s of %s' % (place[2], place[3], place[1])
    if place[0] == 'gpu':
        return '%s of %s' % (place[2], place[1])
    return 'node %s' % place[1]


def unexplained_findings(findings, bench):
    """Pair symptoms that no root on their path explains, said once on the device all their tests
    share: a device (an HCA port, a GPU<->NIC path, a GPU, a node) every informative test through
    which is slow or failed, with two or more peers (one peer cannot tell which end it is). A
    test is informative when it passed, or failed with no root to explain it. Returns the new
    BENCH_DEVICE_UNEXPLAINED findings (their ``at`` the device); a symptom whose tests share no
    such device stays unexplained, and its cause says so - it is never pinned on a neighbour."""
    open_ = dict((f['subject'], f) for f in findings if f['code'] in PAIR_SYMPTOMS and f.get('hosts')
                 and f['explained_by'] is None and f['severity'] != 'info')
    if not open_:
        return []
    pairs = [p for p in (bench or {}).get('pairs') or [] if isinstance(p, dict) and p.get('server') and p.get('client')]

    def places_of(pair):
        return set(tuple(place) for place in F.places(pair_path(pair)))
    bad = [(pair, open_[pair_subject(pair)], places_of(pair)) for pair in pairs
           if pair.get('verdict') != 'ok' and pair_subject(pair) in open_]
    candidates = set(place for t in bad for place in t[2] if place[0] in _SPECIFIC)
    # One pass over the tests (a full mesh at scale is about a million): the informative tests through
    # each candidate - those that passed, and the open ones (an explained failure tells nothing of
    # another device).
    index = dict((place, []) for place in candidates)
    for test in bad:
        for place in test[2] & candidates:
            index[place].append(test)
    for pair in pairs:
        if pair.get('verdict') == 'ok':
            for place in places_of(pair) & candidates:
                index[place].append((pair, None, None))
    suspects = {}
    for place, through in index.items():
        if any(t[1] is None for t in through):
            continue
        peers = set(t[0]['client'] if t[0]['server'] == place[1] else t[0]['server'] for t in through)
        if len(peers) >= 2:
            suspects[place] = (through, peers)
    found, covered = [], set()
    while True:
        ranked = sorted(((len([t for t in through if id(t) not in covered]), place) for place, (through, _p) in suspects.items()),
                        key=lambda item: (-item[0], _SPECIFIC.index(item[1][0]), [natural_key(part) for part in item[1]]))
        if not ranked or ranked[0][0] == 0:
            break
        place = ranked[0][1]
        through, peers = suspects.pop(place)
        covered.update(id(t) for t in through)
        host = place[1]
        rails = sorted(set(str(t[0].get('rail')) for t in through), key=natural_key)
        memories = sorted(set(str(t[0].get('memory')) for t in through))
        sides = sorted(set('server' if t[0]['server'] == host else 'client' for t in through))
        kinds = sorted(set(t[1]['code'] for t in through))
        words = _device_words(place, rails if place[0] == 'hca' else [])
        subject = {'hca': lambda: place[2], 'gpu_nic': lambda: '%s<->%s' % (place[2], place[3]),
                   'gpu': lambda: place[2]}.get(place[0], lambda: 'node')()
        found.append(finding(
            F.BENCH_DEVICE_UNEXPLAINED, host, subject,
            {'device': list(place), 'tests': len(through), 'peers': sorted(peers, key=natural_key), 'rails': rails,
             'memories': memories, 'sides': sides, 'codes': kinds,
             'subjects': sorted(t[1]['subject'] for t in through)[:20]},
            '%s is slow or failed in every test it is in (%d test(s) with %d peers: %s memory, as %s), and no finding on '
            'their path explains it' % (words, len(through), len(peers), ' and '.join(memories), ' and '.join(sides)),
            remedy={'gpu_nic': 'gpu_nic', 'gpu': 'gpu_nic', 'node': 'node'}.get(place[0]),
            device=subject.replace('<->', ' and '), at=[place], path=[place]))
    lone = [t for t in bad if id(t) not in covered]
    for pair, symptom, _places in lone:
        symptom['cause'] = '%s; no finding on its path explains it, and its failing tests share no device that fails with two ' \
            'or more peers: the fault is on this pair\'s path (either node\'s port, cable or PCIe path of rail %s); tests ' \
            'with more peers tell which end' % (symptom['cause'], pair.get('rail'))
    return found


def lost_findings(stages):
    """Nodes that answered at the start and dropped out of a later stage (unreachable, or a task
    failed on them): what that stage would have checked on them is missing, and says why.
    ``stages``: {host: [stages it completed]}, from gpu_fabric_stages."""
    found = []
    ran = []
    for done in (stages or {}).values():
        ran.extend(stage for stage in done or [] if stage not in ran)
    for host in sorted(stages or {}):
        missing = [stage for stage in ran if stage not in (stages[host] or [])]
        if missing and stages[host]:
            found.append(finding(F.HOST_LOST, host, 'node', {'completed': stages[host], 'missing': missing},
                                 '%s completed %s but not %s: it stopped answering or a task failed on it mid-run, so '
                                 'what %s checks on it is missing (its pairs show node_lost or peer_lost)' % (
                                     host, ', '.join(stages[host]), ', '.join(missing), ', '.join(missing))))
    return found


def failure_findings(failures):
    """Tasks that failed on a node and were rescued: ``failures`` {host: [{stage, task, msg}]}."""
    found = []
    for host in sorted(failures or {}):
        for index, failure in enumerate(failures[host] or []):
            failure = failure if isinstance(failure, dict) else {'msg': str(failure)}
            found.append(finding(F.HOST_TASK_FAILED, host,
                                 '%s%s' % (failure.get('stage') or 'run', '#%d' % index if index else ''),
                                 {'stage': failure.get('stage'), 'task': failure.get('task'), 'msg': failure.get('msg')},
                                 'task "%s" failed on %s during %s: %s' % (
                                     failure.get('task') or '?', host, failure.get('stage') or 'the run', failure.get('msg'))))
    return found


def diagnose(nodes, bench=None, collective=None, unreachable=None, stages=None, failures=None):
    """All findings, bottom-up, causes linked. ``nodes``: {host: {'ib': ..., 'gdr': ...}}
    (both None for a node whose facts tasks failed: ``failures`` says why)."""
    findings = []
    # Only nodes with facts are judged by the rules; a node without is named by its failure.
    judged = dict((host, node) for host, node in nodes.items() if node.get('ib') is not None or node.get('gdr') is not None)
    # What each HCA is for (compute rail, storage, management): one decision per node, for every rule.
    roles = dict((host, _rails.node_roles(node)) for host, node in judged.items())
    for host in sorted(judged):
        findings.extend(ib_findings(host, judged[host].get('ib'), roles[host]))
        findings.extend(roce_findings(host, judged[host].get('roce'), roles[host]))   # RoCE lossless
    for host in sorted(judged):
        findings.extend(gdr_findings(host, judged[host].get('gdr'), judged[host].get('ib'), roles[host]))
    findings.extend(mtu_findings(judged, roles))
    # The fleet rule is given the findings so far: it does not name again what they name (and runs no rule itself).
    findings.extend(fleet_findings(judged, findings, roles=roles))
    findings.extend(bench_findings(bench) if bench else [])
    findings.extend(fabric_findings(judged, bench))   # fabric beyond the node
    for host in sorted(judged):
        findings.extend(host_findings(host, judged[host].get('gdr')))
        findings.extend(pcie_findings(host, judged[host].get('gdr'), judged[host].get('ib')))   # PCIe links
        findings.extend(iommu_findings(host, judged[host].get('gdr')))   # IOMMU mode
    findings.extend(collective_findings(collective, judged) if collective else [])
    findings.extend(failure_findings(failures))
    # A node whose benchmark task failed is named by that failure, not a second time as lost.
    failed_stages = dict((host, set((f or {}).get('stage') for f in items if isinstance(f, dict)))
                         for host, items in (failures or {}).items())
    findings.extend(f for f in lost_findings(stages) if not set(f['evidence']['missing']) & failed_stages.get(f['host'], set()))
    if not judged:
        # Fail closed: a run that validated nothing is not a pass.
        findings.append(finding(F.RUN_NOTHING_VALIDATED, None, 'run',
                                {'hosts': sorted(set(nodes) | set(unreachable or []))},
                                'no node returned facts, so nothing was validated: %s' % (
                                    'the host pattern (gpu_fabric_hosts, --limit) matched no inventory host'
                                    if not nodes and not unreachable else
                                    'every node was unreachable or failed (%s)' % ', '.join(sorted(set(nodes) | set(unreachable or []))[:20]))))
    # ``unreachable``: the hosts, or {host: why} where the run kept the connection's error (validate.yml's check).
    for host in sorted(unreachable or []):
        why = unreachable.get(host) if isinstance(unreachable, dict) else None
        findings.append(finding(F.HOST_UNREACHABLE, host, 'node', {'msg': why} if why else {},
                                'no facts came back from %s: it did not answer (%s)' % (host, why) if why else
                                'no facts came back from %s (unreachable, or its facts tasks failed)' % host, at=[('node', host)]))
    complete_paths(findings, judged, bench, collective, roles)
    order = dict((layer, index) for index, layer in enumerate(LAYERS))
    findings.sort(key=lambda f: (order.get(f['layer'], 9), f['host'] or '', f['code'], f['subject'] or ''))
    link_causes(findings)
    # What no root on its path explains: once, on the device its tests share (or said to share none).
    unexplained = unexplained_findings(findings, bench)
    if unexplained:
        findings.extend(unexplained)
        findings.sort(key=lambda f: (order.get(f['layer'], 9), f['host'] or '', f['code'], f['subject'] or ''))
        link_causes(findings)
    return findings
