# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Stand-ins for the nccl-tests binaries (all_reduce_perf, ...) and Open MPI's mpirun on
simulated nodes.

Output layout follows nccl-tests 2.19 (common.cu) as captured on the real 2 x H200 machine
(tests/fixtures/real/h200x2/all_reduce_perf_g2.txt and all_reduce.json): the '#' header,
'Using devices' with one line per rank, NCCL INFO lines when NCCL_DEBUG=INFO, the table
with #wrong columns, 'Out of bounds values', 'Avg bus bandwidth'; -J writes the JSON
(version 3) of the same run. The INFO lines that name the network are NCCL's own texts
(net_ib.cc "NET/IB : Using [0]mlx5_0:1/IB ...", "GPU Direct RDMA Disabled for HCA 0 '...'",
transport lines "via NET/IB/0/GDRDMA").

Ranks: under the mpirun stand-in, GF_SIM_NCCL_NODES lists the nodes (host, root, ranks,
env); alone, the node of GF_SIM_ROOT runs -g ranks. Bandwidth: one node runs over NVLink
(peak 327 GB/s as the real H200 run); across nodes the peak busbw is 92 % of the smallest
node's NIC bandwidth (sum of ACTIVE ports / 8, as hpc.gpu_fabric judges it), and 45 % of
that when a node is not GPUDirect-RDMA ready (gdr_facts; seed 003 measured 46 % of
theoretical without GDR); the curve rises with the message size. Node environment
(inventory gpu_fabric_environment, carried by mpirun from the cluster's hosts file):
GF_SIM_NCCL_WRONG=N makes that node's ranks report N wrong elements per size,
GF_SIM_NCCL_HANG=1 makes the run hang after the header, GF_SIM_NVLINK_GBS sets a node's own
intra-node peak (a node slower than its peers). Faults the facts do not show (a cable with clean
counters, a switch port, a firmware bug): GF_SIM_NCCL_SLOW=F scales the peak of every run across
nodes that includes the node by F; GF_SIM_NCCL_SLOW_WITH=host[,host] does so (by
GF_SIM_NCCL_SLOW, default 0.3) only when one of those hosts is in the run too (a bad pair).
GF_SIM_NCCL_LOG=file and GF_SIM_NCCL_DELAY=seconds log when each run started and ended.
GF_SIM_NCCL_REPLAY=file prints a real run's captured output instead. Runs over one node's GPUs print NCCL's
ENV, GRAPH and connection lines of the real 4 x H200 runs, and follow NCCL_P2P_DISABLE / NCCL_SHM_DISABLE and the
tuning variables NCCL_MAX_NCHANNELS, NCCL_PROTO, NCCL_NTHREADS, NCCL_BUFFSIZE (NCCL_ALGO printed, no cost) from the
environment and the node's configuration files (/etc/nccl.conf, ~/.nccl.conf, $NCCL_CONF_FILE below its root),
slowed as the real 2 x H200 runs were (tuning_factor).

mpirun: -np/-n, --host/-H host[:slots],..., -x NAME[=VALUE], --mca K V and the usual
switches; hosts are looked up in $GF_SIM_HOSTS (JSON written by tests/sim/cluster.py);
too few slots and a missing executable print Open MPI's texts.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from tests.sim.tools_perftest import SysRoot, _gdr, _ib  # noqa: E402  (imports the collection the same way)
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _nccl_conf  # noqa: E402

NVLINK_GBS = {'nvidia': 327.0, 'amd': 300.0, 'metax': 150.0}
GPU_NAME = {'nvidia': 'NVIDIA H100 80GB HBM3', 'amd': 'AMD Instinct MI300X', 'metax': 'MetaX C500'}
NET_EFFICIENCY = 0.92
NO_GDR_FACTOR = 0.45
HALF_SIZE = 8 * 1024 * 1024   # bytes at which busbw reaches half its peak (the real H200 run: ~8-16 MiB)
BUS_FACTOR = {'all_reduce_perf': lambda n: 2.0 * (n - 1) / n, 'all_gather_perf': lambda n: (n - 1.0) / n,
              'reduce_scatter_perf': lambda n: (n - 1.0) / n, 'alltoall_perf': lambda n: (n - 1.0) / n,
              'broadcast_perf': lambda n: 1.0, 'reduce_perf': lambda n: 1.0, 'sendrecv_perf': lambda n: 1.0}
REDOP = {'all_reduce_perf': 'sum', 'reduce_scatter_perf': 'sum', 'reduce_perf': 'sum'}
ROOTED = ('broadcast_perf', 'reduce_perf')
SIZES = {'': 1, 'K': 1024, 'M': 1024 ** 2, 'G': 1024 ** 3}


def _size(text):
    text = text.strip().upper()
    suffix = text[-1] if text and text[-1] in 'KMG' else ''
    return int(float(text[:-1] if suffix else text) * SIZES[suffix])


def parse_args(argv):
    opts = {'t': '1', 'g': '1', 'b': '32M', 'e': '32M', 'f': '1', 'i': None, 'n': '20', 'w': '1', 'c': '1', 'o': 'sum',
            'd': 'float', 'r': '0', 'z': '0', 'G': '0', 'm': '1', 'J': None, 'T': None}
    rest = list(argv)
    while rest:
        flag = rest.pop(0)
        if flag in ('-h', '--help'):
            print('USAGE: %s \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n\t'
                  '[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n\t'
                  '[-J,--output_file <output file>] \n\t[-h,--help]' % os.path.basename(sys.argv[0]))
            sys.exit(0)
        if len(flag) != 2 or flag[0] != '-' or flag[1] not in opts or not rest:
            sys.stderr.write("%s: invalid option -- '%s'\n" % (sys.argv[1], flag.lstrip('-')))
            sys.exit(1)
        opts[flag[1]] = rest.pop(0)
    return opts


def gpu_buses(root, env=None):
    """The bus ids nccl-tests prints for the node's GPUs ('Using devices': '[0000:3b:00]', the PCI address
    without its function: tests/fixtures/real/h200x2/all_reduce_perf_g2.txt), in PCI order as CUDA numbers
    them, the ones CUDA_VISIBLE_DEVICES names (the node's env) first and only."""
    sysroot = SysRoot(root)
    gpus = _gdr.read_gdr(sysroot, _ib.list_rdma_devices(sysroot))['gpus']
    buses = sorted(gpu['pci_address'].rsplit('.', 1)[0] for gpu in gpus)
    visible = str((env or {}).get('CUDA_VISIBLE_DEVICES', '')).strip()
    if visible:
        picked = [int(item) for item in visible.split(',') if item.strip().isdigit() and int(item) < len(buses)]
        buses = [buses[index] for index in picked]
    return buses


def node_peak(root):
    """(NIC GB/s, GDR ready, vendor, GPU count, HCA names) of one simulated node."""
    sysroot = SysRoot(root)
    devices = _ib.read_ib(sysroot)
    gdr = _gdr.read_gdr(sysroot, _ib.list_rdma_devices(sysroot))
    active = [(d['name'], p) for d in devices for p in d['ports'] if p.get('state') == 'ACTIVE' and p.get('rate_gbps')]
    nic = sum(p['rate_gbps'] for _name, p in active) / 8.0
    vendor = gdr['gpus'][0]['vendor'] if gdr['gpus'] else None
    return nic, gdr['gdr_ready'], vendor, len(gdr['gpus']), [name for name, _p in active]


def nodes_from_env(opts):
    listed = os.environ.get('GF_SIM_NCCL_NODES')
    if listed:
        return json.loads(listed)
    root = os.environ.get('GF_SIM_ROOT', '/')
    host = open(os.path.join(root, 'etc', 'hostname')).read().strip() if os.path.exists(os.path.join(root, 'etc', 'hostname')) else 'node'
    return [{'host': host, 'root': root, 'ranks': 1, 'env': dict(os.environ)}]


# Between two GPUs of one node NCCL uses P2P over NVLink, SHM with NCCL_P2P_DISABLE=1, and its network
# transport looped back (NET/Socket) with NCCL_SHM_DISABLE=1 too; the real 4 x H200 runs measured 328.62,
# 27.83 and 3.67 GB/s (tests/fixtures/real/h200x4-split/).
INTRA_FACTOR = {'P2P': 1.0, 'SHM': 27.83 / 328.62, 'NET': 3.67 / 328.62}
# NCCL's topology of a simulated GPU (GRAPH lines): its NVLink total, as the H200 node printed it (the
# other vendors': about 10 % above their simulated peak, the share the H200 run reached).
TOPOLOGY_GBS = {'nvidia': 370.8, 'amd': 336.0, 'metax': 165.0}


# NCCL's settings on one node: the environment wins, then $NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf
# (NCCL src/misc/param.cc; read below the node's root by the collection's own reader).
def node_settings(node):
    env = dict(node.get('env') or {})
    root = node.get('root') or '/'
    if root == '/':
        return env
    sysroot = SysRoot(root)
    facts = _nccl_conf.read_nccl(sysroot, env)
    return dict(env, **dict((name, item['value']) for name, item in facts['settings'].items() if name not in env))


# The tuning variables' cost on 2 x H200 (all_reduce_perf, NCCL 2.28.9, Avg bus bandwidth against the healthy
# 79.36 GB/s; tests/fixtures/real/h200x2/state/README.md): NCCL_MAX_NCHANNELS=1 8.21, =2 (with NCCL_ALGO=Ring,
# which two GPUs use anyway) 15.53; NCCL_PROTO=LL 43.55; NCCL_NTHREADS=64 (with NCCL_PROTO=Simple) 39.18;
# NCCL_BUFFSIZE=262144 66.12, =65536 34.33. Values between are interpolated, others cost nothing.
HEALTHY_AVG = 79.36
TUNED_AVG = {('NCCL_MAX_NCHANNELS', 1): 8.21, ('NCCL_MAX_NCHANNELS', 2): 15.53, ('NCCL_PROTO', 'LL'): 43.55,
             ('NCCL_NTHREADS', 64): 39.18, ('NCCL_BUFFSIZE', 65536): 34.33, ('NCCL_BUFFSIZE', 262144): 66.12}
_STRING_PARAMS = ('NCCL_PROTO', 'NCCL_ALGO')


def _int(value):
    try:
        return int(str(value).strip(), 0)
    except ValueError:
        return None


def tuning_factor(settings):
    factor = 1.0
    channels = _int(settings.get('NCCL_MAX_NCHANNELS', ''))
    if channels is not None and channels >= 1:
        factor *= min(1.0, TUNED_AVG.get(('NCCL_MAX_NCHANNELS', channels), 15.53 * channels / 2) / HEALTHY_AVG)
    if str(settings.get('NCCL_PROTO', '')).strip().upper() == 'LL':
        factor *= TUNED_AVG[('NCCL_PROTO', 'LL')] / HEALTHY_AVG
    threads = _int(settings.get('NCCL_NTHREADS', ''))
    if threads is not None and 0 < threads < 512:
        factor *= min(1.0, TUNED_AVG[('NCCL_NTHREADS', 64)] / HEALTHY_AVG * (threads / 64.0) ** 0.34)
    size = _int(settings.get('NCCL_BUFFSIZE', ''))
    if size is not None and 0 < size < 4194304:
        low, high = TUNED_AVG[('NCCL_BUFFSIZE', 65536)] / HEALTHY_AVG, TUNED_AVG[('NCCL_BUFFSIZE', 262144)] / HEALTHY_AVG
        if size <= 65536:
            factor *= low * (size / 65536.0) ** 0.5
        elif size <= 262144:
            factor *= low + (high - low) * (size - 65536) / (262144 - 65536.0)
        else:
            factor *= high + (1 - high) * (size - 262144) / (4194304 - 262144.0)
    return factor


def env_lines(settings):
    """NCCL's ENV lines for the settings NCCL reads (src/misc/param.cc: '%s set by environment to %lld.' for a number,
    the string parameters without the period), whatever file they came from."""
    for name in sorted(settings):
        if name in ('NCCL_P2P_DISABLE', 'NCCL_P2P_LEVEL', 'NCCL_SHM_DISABLE') or name in TUNING_NAMES:
            value = str(settings[name])
            yield '%s set by environment to %s%s' % (name, value, '' if name in _STRING_PARAMS else '.')


TUNING_NAMES = ('NCCL_MAX_NCHANNELS', 'NCCL_MIN_NCHANNELS', 'NCCL_PROTO', 'NCCL_ALGO', 'NCCL_BUFFSIZE', 'NCCL_NTHREADS', 'NCCL_NVLS_ENABLE')


def intra_transport(env):
    p2p_off = str(env.get('NCCL_P2P_DISABLE', '')) == '1' or str(env.get('NCCL_P2P_LEVEL', '')).upper() in ('LOC', '0')
    if not p2p_off:
        return 'P2P'
    return 'NET' if str(env.get('NCCL_SHM_DISABLE', '')) == '1' else 'SHM'


def local_info(node, vendor, ranks):
    """The INFO lines of a run over one node's GPUs that say how they talked, in the real run's texts
    (tests/fixtures/real/h200x4-split/nodeA.txt, nodeB.txt): the settings NCCL saw (ENV), its topology
    (GRAPH), the communicator and one connection per pair of neighbours."""
    env = node_settings(node)
    host = node['host']
    kind = intra_transport(env)
    total = float(env.get('GF_SIM_NVLINK_GBS') or TOPOLOGY_GBS.get(vendor, 100.0))
    for rank in range(ranks):
        tag = '%s:1000:%d [%d] NCCL INFO ' % (host, 1010 + rank, rank)
        for line in env_lines(env):
            print(tag + line)
        print(tag + '=== System : maxBw %.1f totalBw %.1f ===' % (total if kind == 'P2P' else (48.0 if kind == 'SHM' else 1.2), total))
        print(tag + 'CPU/0-0 (1/1/1)')
        for gpu in range(ranks):
            print(tag + '+ PCI[48.0] - GPU/0-%x0 (%d)' % (6 + gpu, gpu))
            print(tag + '              + NVL[%.1f] - NVS/0-0' % total)
        print(tag + '==========================================')
        nodes = ranks if kind == 'NET' else 1
        print(tag + 'comm 0x55d07d1557d0 rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0'
              % (rank, ranks, nodes, ranks // nodes, rank if nodes == 1 else 0))
    for rank in range(ranks if ranks > 1 else 0):
        peer = (rank + 1) % ranks
        tag = '%s:1000:%d [%d] NCCL INFO ' % (host, 1020 + rank, rank)
        via = {'P2P': 'via P2P/direct pointer', 'SHM': 'via SHM/direct/direct', 'NET': '[send] via NET/Socket/0'}[kind]
        print(tag + 'Channel 00/0 : %d[%d] -> %d[%d] %s' % (rank, rank, peer, peer, via))


def slow_factor(nodes):
    """The slowest factor a node's GF_SIM_NCCL_SLOW(_WITH) puts on a run across ``nodes``."""
    names = set(n['host'] for n in nodes)
    factor = 1.0
    for node in nodes:
        env = node.get('env') or {}
        with_hosts = [h for h in (env.get('GF_SIM_NCCL_SLOW_WITH') or '').split(',') if h]
        if with_hosts and not names & set(with_hosts):
            continue
        if with_hosts or env.get('GF_SIM_NCCL_SLOW'):
            factor = min(factor, float(env.get('GF_SIM_NCCL_SLOW') or 0.3))
    return factor


def main_perf(bench, argv):
    opts = parse_args(argv)
    replay = os.environ.get('GF_SIM_NCCL_REPLAY')
    if replay:
        # A real run's whole output, as it was captured (tests/fixtures/real/...): the same evidence as on
        # the real node, through the same module and playbook.
        with open(replay) as handle:
            sys.stdout.write(handle.read())
        return 0
    gpus_per_rank = int(opts['g']) * int(opts['t'])
    nodes = nodes_from_env(opts)
    info = [node_peak(n['root']) for n in nodes]
    total_ranks = sum(n['ranks'] for n in nodes) * gpus_per_rank
    minb, maxb = _size(opts['b']), _size(opts['e'])
    print('# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809')
    print('# Collective test starting: %s' % bench)
    print('# nThread %s nGpus %s minBytes %d maxBytes %d step: %s(factor) warmup iters: %s iters: %s agg iters: %s validation: %s '
          'graph: %s unalign: 0' % (opts['t'], opts['g'], minb, maxb, opts['f'], opts['w'], opts['n'], opts['m'], opts['c'], opts['G']))
    print('#')
    print('# Using devices')
    sys.stdout.flush()
    for node, (_nic, _gdr_ok, _vendor, gpus, _hcas) in zip(nodes, info):
        if node['ranks'] * gpus_per_rank > gpus:
            print('Invalid number of GPUs: %d requested but only %d were found.' % (node['ranks'] * gpus_per_rank, gpus))
            print('Please check the number of processes and GPUs per process.')
            print(' .. %s pid %d: Test failure common.cu:1454' % (node['host'], os.getpid()))
            return 1
    debug = os.environ.get('NCCL_DEBUG', '').upper() == 'INFO'
    rank = 0
    for node, (_nic, _gdr_ok, vendor, _gpus, _hcas) in zip(nodes, info):
        buses = gpu_buses(node['root'], node.get('env'))
        for local in range(node['ranks'] * gpus_per_rank):
            bus = buses[local] if local < len(buses) else '0000:%02x:00' % (0x18 + local)
            print('#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s' % (
                rank, 1000 + rank // gpus_per_rank, node['host'], local, bus, GPU_NAME.get(vendor, 'GPU')))
            rank += 1
    multi = len(nodes) > 1
    if debug:
        print('%s:1000:1000 [0] NCCL INFO NCCL version 2.28.9+cuda13.0' % nodes[0]['host'])
        for node, (_nic, gdr_ok, _vendor, _gpus, hcas) in zip(nodes, info):
            tag = '%s:1000:1010 [0] NCCL INFO ' % node['host']
            if hcas:
                print(tag + 'NET/IB : Using %s ; OOB eth0:%s<0>' % (' '.join('[%d]%s:1/IB' % (i, h) for i, h in enumerate(hcas)),
                                                                    node.get('address', '10.0.0.1')))
                print(tag + 'Using network IB')
                if not gdr_ok:
                    for index, hca in enumerate(hcas):
                        print(tag + "NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)" % (index, hca))
            if multi and hcas:
                # A network connection joins this node's first rank to the next node's (real NCCL names
                # the two ranks it connects: 'Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA').
                via = 'via NET/IB/0' + ('/GDRDMA' if gdr_ok else '')
                first = sum(other['ranks'] for other in nodes[:nodes.index(node)]) * gpus_per_rank
                following = (first + node['ranks'] * gpus_per_rank) % total_ranks
                print(tag + 'Channel 00/0 : %d[0] -> %d[0] [send] %s' % (first, following, via))
        if not multi:
            local_info(nodes[0], info[0][2], total_ranks)
    # GF_SIM_NCCL_LOG (a node's env): each run appends {hosts, start, end} there, after sleeping
    # GF_SIM_NCCL_DELAY seconds, so a test can see which runs overlapped in time.
    log = next((n['env']['GF_SIM_NCCL_LOG'] for n in nodes if (n.get('env') or {}).get('GF_SIM_NCCL_LOG')), None)
    if log:
        start = time.time()
        time.sleep(float(next((n['env']['GF_SIM_NCCL_DELAY'] for n in nodes if (n.get('env') or {}).get('GF_SIM_NCCL_DELAY')), 0)))
        with open(log, 'a') as handle:
            handle.write(json.dumps({'hosts': sorted(n['host'] for n in nodes), 'start': start, 'end': time.time()}) + '\n')
    if any(n.get('env', {}).get('GF_SIM_NCCL_HANG') == '1' for n in nodes):
        sys.stdout.flush()
        while True:
            time.sleep(3600)
    if multi:
        peak = min(nic * NET_EFFICIENCY * (1.0 if gdr_ok else NO_GDR_FACTOR) for nic, gdr_ok, _v, _g, _h in info)
        peak *= slow_factor(nodes)
    else:
        # GF_SIM_NVLINK_GBS: a node whose GPU links are slower than its peers' (an NVLink down,
        # GPUs on PCIe), seen only by comparing per-node runs.
        peak = float(nodes[0].get('env', {}).get('GF_SIM_NVLINK_GBS') or NVLINK_GBS.get(info[0][2], 100.0))
        settings = node_settings(nodes[0])
        peak *= INTRA_FACTOR[intra_transport(settings)] * tuning_factor(settings)
    wrong = sum(int(n.get('env', {}).get('GF_SIM_NCCL_WRONG') or 0) for n in nodes)
    factor = BUS_FACTOR.get(bench, BUS_FACTOR['all_reduce_perf'])(max(total_ranks, 2))
    redop = REDOP.get(bench, 'none')
    root = opts['r'] if bench in ROOTED else '-1'
    print('#')
    print('#                                                              out-of-place                       in-place          ')
    print('#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ')
    print('#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ')
    rows = []
    size = minb
    step = int(opts['f'])
    while size <= maxb:
        busbw = peak * size / (size + HALF_SIZE)
        algbw = busbw / factor
        usec = size / (algbw * 1e3) if algbw else 0.0
        rows.append((size, size // 4, usec, algbw, busbw))
        print('%12d  %12d  %8s  %6s  %6s  %7.2f  %6.2f  %6.2f  %6d  %7.2f  %6.2f  %6.2f  %6d' % (
            size, size // 4, opts['d'], redop, root, usec, algbw, busbw, wrong, usec, algbw, busbw, wrong))
        if step <= 1:
            break
        size *= step
    average = sum(r[4] for r in rows) / len(rows) if rows else 0.0
    print('# Out of bounds values : 0 OK')
    print('# Avg bus bandwidth    : %g ' % round(average, 4))
    print('#')
    print('# Collective test concluded: %s' % bench)
    print('#')
    if opts['J']:
        with open(opts['J'], 'w') as handle:
            json.dump({'version': 3, 'args': [bench] + list(argv), 'nccl_version': 22809,
                       'config': {'nthreads': int(opts['t']), 'ngpus': int(opts['g']), 'minimum_bytes': minb, 'maximum_bytes': maxb},
                       'results': [{'size': s, 'count': c, 'type': opts['d'], 'redop': redop, 'root': '    %s' % root,
                                    'out_of_place': {'time': t, 'alg_bw': a, 'bus_bw': b, 'nwrong': float(wrong)},
                                    'in_place': {'time': t, 'alg_bw': a, 'bus_bw': b, 'nwrong': float(wrong)}}
                                   for s, c, t, a, b in rows],
                       'out_of_bounds': {'count': 0, 'okay': 'true'},
                       'average_bus_bandwidth': {'bandwidth': round(average, 4), 'okay': 'unchecked'}, 'errors': ['']}, handle)
    return 0


def main_mpirun(argv):
    hosts, processes, names, rest = [], None, [], list(argv)
    while rest and rest[0].startswith('-'):
        flag = rest.pop(0)
        if flag in ('-np', '-n', '-c'):
            processes = int(rest.pop(0))
        elif flag in ('--host', '-H', '-host'):
            hosts += [h for h in rest.pop(0).split(',') if h]
        elif flag == '-x':
            names.append(rest.pop(0))
        elif flag in ('--mca', '-mca'):
            rest[:2] = []
        elif flag in ('--bind-to', '--map-by', '--rank-by'):
            rest.pop(0)
    with open(os.environ['GF_SIM_HOSTS']) as handle:
        known = json.load(handle)
    slots = []
    for entry in hosts or ['localhost']:
        name, _sep, count = entry.partition(':')
        if name not in known:
            sys.stderr.write('ssh: Could not resolve hostname %s: Name or service not known\n'
                             'ORTE was unable to reliably start one or more daemons.\n' % name)
            return 1
        slots.append((name, int(count) if count else 1))
    total = sum(count for _name, count in slots)
    processes = processes or total
    if processes > total:
        sys.stderr.write('--------------------------------------------------------------------------\n'
                         'There are not enough slots available in the system to satisfy the %d\n'
                         'slots that were requested by the application:\n\n  %s\n\n'
                         'Either request fewer slots for your application, or make more slots\navailable for use.\n'
                         '--------------------------------------------------------------------------\n'
                         % (processes, rest[0] if rest else ''))
        return 1
    if not rest or not os.path.exists(rest[0]) and not any(
            os.path.exists(os.path.join(d, rest[0])) for d in os.environ.get('PATH', '').split(os.pathsep)):
        sys.stderr.write('--------------------------------------------------------------------------\n'
                         'mpirun was unable to find the specified executable file, and therefore\n'
                         'did not launch the job.  This error was first reported for process\n'
                         'rank 0; it may have occurred for other processes as well.\n\n'
                         'NOTE: A common cause for this error is misspelling a mpirun command\n'
                         '      line parameter option (remember that mpirun interprets the first\n'
                         '      unrecognized command line token as the executable).\n\n'
                         'Node:       %s\nExecutable: %s\n'
                         '--------------------------------------------------------------------------\n'
                         % (slots[0][0], rest[0] if rest else ''))
        return 1
    # Ranks fill the hosts in order (Open MPI's default --map-by slot).
    nodes, left = [], processes
    for name, count in slots:
        take = min(count, left)
        left -= take
        if take:
            nodes.append({'host': known[name].get('hostname', name), 'root': known[name]['root'], 'ranks': take,
                          'address': known[name].get('address'), 'env': known[name].get('env', {})})
    env = dict(os.environ, GF_SIM_NCCL_NODES=json.dumps(nodes))
    os.execvpe(rest[0], rest, env)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    tool = argv.pop(0)
    if tool == 'mpirun':
        return main_mpirun(argv)
    return main_perf(tool, argv)


if __name__ == '__main__':
    sys.exit(main())
