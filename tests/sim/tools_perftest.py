# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""perftest stand-in: ib_{write,read,send}_{bw,lat} on the simulated node at $GF_SIM_ROOT.

Usage (from the six scripts in tests/sim/bin): python3 tools_perftest.py TOOL [perftest args]

Follows linux-rdma/perftest 6.06 (the version of fixtures/real/cpu-vm-no-rdma):
- flags of perftest_parameters.c parser() (getopt_long with GNU argument permutation:
  the server address may stand anywhere), '--version' printing 'Version: 6.06' and
  '--help' printing the usage, both exiting 1 (main(): parser() != 0 -> FAILURE);
- the order of <tool>.c main(): device (ctx_find_dev), port (check_link), the server's
  'Waiting for client to connect' box, the TCP connection (establish_connection), GPU
  memory and MR (ctx_init), the banner (ctx_print_test_info), the key exchange
  (ctx_hand_shake), QP to RTR (ctx_connect), the address lines
  (ctx_print_pingpong_data), the table;
- the byte layout of RESULT_LINE, RESULT_FMT(_G), RESULT_FMT_LAT(_DUR) and REPORT_FMT*,
  tabs included (the public fixtures are the same lines with tabs expanded);
- the texts and exit status 1 of its failures: no device, port not ACTIVE, connection
  refused, busy port, peer gone during the exchange, peer gone during the test (a
  completion error, status 12), GPU missing, MR of GPU memory refused, RoCE GID index
  without a GID (modify QP to RTR fails).

Two processes really talk over TCP (JSON lines, not perftest's wire format): the server
listens on $GF_SIM_ADDR (a simulated node's address, e.g. 127.0.1.1), else on
--source_ip, else on all addresses like the real one; the client binds $GF_SIM_ADDR as
its source. Each side reads its own node: the port's rate, state, link layer, LID, GID
and MTU from sysfs, and for GPU memory the GPU<->NIC distance, ACS and peer memory
through the collection's _gdr reader. Bandwidth is ~97 % of the slower side's port rate
at large sizes (seed 000: 392 of 400 Gb/s), bounded by a message rate at small ones;
GPU memory on a NODE/SYS path gets 60 %, PHB 85 %, a path with ACS redirect 70 %.
Latency is a base per verb plus serialisation at the port rate; t_stdev prints 0.00 as
6.06 computes it on whole microseconds (print_report_lat: int temp_var).

Time: the run sleeps as long as the iterations would take at that rate, scaled down so
that a whole run stays under $GF_SIM_PERFTEST_MAX_S (default 0.5 s). Environment:
GF_SIM_PERFTEST_HANG=1 makes a server accept its client and never answer;
GF_SIM_PERFTEST_GARBAGE=1 makes a client print half a row and junk, then die by SIGSEGV;
GF_SIM_PERFTEST_BUILD=cuda,cuda_dmabuf,rocm,maca says what the binary was built with
(default: what the node's GPUs need); GF_SIM_PYTHON (read by the scripts) is the
interpreter to start. The real tool's sleep(1) after connecting is left out.
"""

from __future__ import annotations

import errno
import getopt
import json
import os
import random
import select
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _collection_path():
    """Make ansible_collections.hpc.gpu_fabric importable: the checkout links itself under
    .collections/; a copy for ansible-test sits below ansible_collections/hpc/gpu_fabric."""
    parts = REPO.split(os.sep)
    if parts[-3:] == ['ansible_collections', 'hpc', 'gpu_fabric']:
        sys.path.insert(0, os.sep.join(parts[:-3]))
    else:
        sys.path.insert(0, os.path.join(REPO, '.collections'))


try:
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr, _host, _ib, _pci
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
except ImportError:
    _collection_path()
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr, _host, _ib, _pci
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

try:
    from tests.sim import tools_window  # the counters a test moves
except ImportError:  # run as a script from tests/sim/bin
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tools_window

VERSION = '6.06'
FAILURE = 1
DEF_PORT = 18515
MIN_ITER, MAX_ITER = 5, 100000000
MAX_SIZE = 8388608
RESULT_LINE = '-' * 87 + '\n'
RESULT_FMT = ' #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]'
RESULT_FMT_G = ' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]'
RESULT_FMT_LAT = (' #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]'
                  '   99% percentile[usec]   99.9% percentile[usec] ')
RESULT_FMT_LAT_DUR = ' #bytes        #iterations       t_avg[usec]    tps average'
REPORT_FMT = ' %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f'
REPORT_FMT_EXT = ' %-7d    %d           %-7.6f            %-7.6f            %-7.6f'
REPORT_FMT_LAT = ' %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f'
REPORT_FMT_LAT_DUR = ' %-7d       %d            %-7.2f        %-7.2f'
WAITING = '\n************************************\n* Waiting for client to connect... *\n************************************\n'
NO_DEVICE = ' Did not detect devices \n If device exists, check if driver is up\n'
PORT_STATES = {0: 'Nop', 1: 'Down', 2: 'Init', 3: 'Armed', 4: '', 5: 'Active Defer'}
TITLES = {'send': 'Send', 'write': 'RDMA_Write', 'read': 'RDMA_Read'}
# Default inline size of latency tests (perftest_parameters.c ctx_set_max_inline, RC).
LAT_INLINE = {'write': 220, 'send': 236, 'read': 0}
# Base one-way latency in microseconds of a 2-byte message on an idle link (ConnectX
# class; seed 002 ib_send_lat on ConnectX-4: typical 1.14 us). read_lat reports the
# round trip (print_report_lat: rtt_factor 1 for READ).
LAT_BASE_US = {'write': 0.95, 'send': 1.05, 'read': 1.85}
MSG_RATE_MPPS = 3.5  # per QP at small sizes (seed 000: ~3.46 Mpps at 2..4096 B)
PLATEAU = 0.97       # of the port rate at large sizes (seed 000: 392.25 / 400)
GPU_DISTANCE_FACTOR = {'PIX': 1.0, 'PXB': 1.0, 'PHB': 0.85, 'NODE': 0.6, 'SYS': 0.6}
ACS_REDIRECT_FACTOR = 0.7
GPU_VENDOR = {'use_cuda': 'nvidia', 'use_rocm': 'amd', 'use_maca': 'metax'}
GPU_NAMES = {0x2330: 'NVIDIA H100 80GB HBM3', 0x2335: 'NVIDIA H200', 0x20b5: 'NVIDIA A100 80GB PCIe',
             0x74a1: 'AMD Instinct MI300X', 0x740f: 'AMD Instinct MI210'}

SHORT_OPTS = 'w:y:p:d:i:m:s:n:t:u:S:x:c:q:I:o:M:r:Q:A:l:D:f:B:T:L:E:J:j:K:k:X:W:aFegzRvhbNVCHUOZP'
# long_options of perftest_parameters.c parser() in 6.06 ('=' takes an argument).
LONG_OPTS = ('port= ib-dev= ib-port= mtu= size= iters= tx-depth= qp-timeout= sl= gid-index= all CPU-freq connection= qp= '
             'events vector= inline_size= outs= mcg comm_rdma_cm rdma_cm tos= hop_limit= help MGID= rx-depth= bidirectional '
             'cq-mod= noPeak version report-cycles report-histogrm report-unsorted atomic_type= dualport post_list= duration= '
             'margin= source_mac= dest_mac= dest_ip= source_ip= dest_port= source_port= ethertype= limit_bw= limit_msgrate= '
             'server client mac_fwd use_rss report-counters= force-link= remote_mac= local_mac= remote_ip= local_ip= '
             'remote_port= local_port= run_infinitely report_gbits use-srq report-both reversed pkey_index= inline_recv= tcp '
             'burst_size= typical_pkt_size= rate_limit= rate_limit_type= rate_units= output= cpu_util out_json '
             'out_json_file= latency_gap= flow_label= retry_count= dont_xchg_versions mmap= mmap-offset= ipv6 raw_ipv6 '
             'report-per-port odp use_hugepages use_old_post_send promiscuous raw_mcast mr_per_qp dlid= tclass= '
             'wait_destroy= flows= flows_burst= reply_every= perform_warm_up vlan_en vlan_pcp= recv_post_list= '
             'disable_pcie_relaxed use_ooo').split()
# Only in builds with that support (#ifdef HAVE_CUDA, HAVE_CUDA_DMABUF, HAVE_ROCM; MetaX fork).
BUILD_OPTS = {'cuda': ['use_cuda=', 'use_cuda_bus_id='], 'cuda_dmabuf': ['use_cuda_dmabuf'], 'rocm': ['use_rocm='], 'maca': ['use_maca=']}
SHORT_LONG = {'-p': 'port', '-d': 'ib-dev', '-i': 'ib-port', '-m': 'mtu', '-s': 'size', '-n': 'iters', '-t': 'tx-depth',
              '-x': 'gid-index', '-a': 'all', '-F': 'CPU-freq', '-c': 'connection', '-q': 'qp', '-R': 'rdma_cm',
              '-h': 'help', '-b': 'bidirectional', '-Q': 'cq-mod', '-N': 'noPeak', '-V': 'version', '-D': 'duration'}


class Exit(Exception):
    def __init__(self, code, err=''):
        super(Exit, self).__init__(code)
        self.code = code
        self.err = err


def out(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def err(text):
    sys.stderr.write(text)
    sys.stderr.flush()


def c_hex(value, width):
    """printf('%#0<width>x'): C prints no 0x prefix for zero ('LID 0000' in the fixtures)."""
    if value == 0:
        return '0' * width
    return '%#0*x' % (width, value)


# ---------------------------------------------------------------------------- arguments

class Params(object):
    def __init__(self, tool):
        self.tool = tool
        _ib_prefix, self.verb, self.tst = tool.split('_')
        self.device = None
        self.ib_port = 1
        self.gid_index = -1
        self.port = DEF_PORT
        self.size = 65536 if self.tst == 'bw' else 2
        self.all = False
        self.iters = 5000 if tool == 'ib_write_bw' else 1000
        self.duration = None
        self.qps = 1
        self.duplex = False
        self.gbits = False
        self.pcir_disabled = False
        self.cpu_freq_f = False
        self.rdma_cm = False
        self.run_infinitely = False
        self.no_peak = False
        self.source_ip = None
        self.mtu = None
        self.gpu_flag = None
        self.gpu_index = None
        self.dmabuf = False
        self.server_name = None
        self.tx_depth = 128 if self.tst == 'bw' else 1
        self.cq_mod = 100


def build_features(sysroot):
    env = os.environ.get('GF_SIM_PERFTEST_BUILD')
    if env is not None:
        return set(f.strip() for f in env.split(',') if f.strip())
    vendors = set(_pci.GPU_VENDORS[d['vendor_id']] for d in _pci.read_pci(sysroot).values() if _pci.is_gpu(d))
    features = set()
    if 'nvidia' in vendors:
        features |= {'cuda', 'cuda_dmabuf'}
    if 'amd' in vendors:
        features.add('rocm')
    if 'metax' in vendors:
        features.add('maca')
    return features


def usage(params, features):
    lines = ['Usage:', '  %s            start a server and wait for connection' % params.tool,
             '  %s <host>     connect to server at <host>' % params.tool, '', 'Options:',
             '  -a, --all  Run sizes from 2 till 2^23',
             '  -b, --bidirectional  Measure bidirectional bandwidth (default unidirectional)',
             '  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)',
             '  -D, --duration  Run test for a customized period of seconds.',
             '  -F, --CPU-freq  Do not show a warning even if cpufreq_ondemand module is loaded, and cpu-freq is not on max.',
             '  -h, --help  Show this help screen.',
             '  -i, --ib-port=<port>  Use port <port> of IB device (default 1)',
             '  -n, --iters=<iters>  Number of exchanges (at least %d, default %d)' % (MIN_ITER, params.iters),
             '  -p, --port=<port>  Listen on/connect to port <port> (default %d)' % DEF_PORT]
    if params.tst == 'bw':
        lines.append('  -q, --qp=<num of qp\'s>  Num of qp\'s(default 1)')
    lines += ['  -R, --rdma_cm  Connect QPs with rdma_cm and run test on those QPs',
              '  -s, --size=<size>  Size of message to exchange (default %d)' % params.size,
              '  -V, --version  Display version number',
              '  -x, --gid-index=<index>  Test uses GID with GID index (Default : IB - no gid . ETH - 0)']
    if params.tst == 'bw':
        lines += ['      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MB/sec)',
                  '      --run_infinitely  Run test forever, print results every <duration> seconds']
    if 'cuda' in features:
        lines += ['      --use_cuda=<cuda device id> Use CUDA specific device for GPUDirect RDMA testing',
                  '      --use_cuda_bus_id=<cuda full BUS id> Use CUDA specific device, based on its full PCIe address, for GPUDirect RDMA testing']
    if 'cuda_dmabuf' in features:
        lines.append('      --use_cuda_dmabuf Use CUDA DMA-BUF for GPUDirect RDMA testing')
    if 'rocm' in features:
        lines.append('      --use_rocm=<rocm device id> Use selected ROCm device for GPUDirect RDMA testing')
    if 'maca' in features:
        lines.append('      --use_maca=<maca device id> Use selected MACA device for GPUDirect RDMA testing')
    lines.append('      --disable_pcie_relaxed Disable PCIe relaxed ordering')
    out('\n'.join(lines) + '\n')


def _int(name, text, low=None, high=None):
    try:
        value = int(text, 0)
    except ValueError:
        raise Exit(FAILURE, ' %s argument %s should be int\n' % (name, text))
    if low is not None and not low <= value <= high:
        raise Exit(FAILURE, ' %s should be between %d and %d\n' % (name, low, high))
    return value


# Flags without a value: option name -> Params attribute set to True.
SWITCHES = {'all': 'all', 'bidirectional': 'duplex', 'report_gbits': 'gbits', 'disable_pcie_relaxed': 'pcir_disabled',
            'CPU-freq': 'cpu_freq_f', 'rdma_cm': 'rdma_cm', 'run_infinitely': 'run_infinitely', 'noPeak': 'no_peak',
            'use_cuda_dmabuf': 'dmabuf'}
# Integer options: name -> (attribute, perftest's label in its range errors, low, high).
NUMBERS = {'port': ('port', 'Port', None, None), 'ib-port': ('ib_port', 'IB Port', None, None),
           'gid-index': ('gid_index', 'Gid index', 0, 255), 'size': ('size', 'Message size', 1, MAX_SIZE),
           'iters': ('iters', 'Iteration num', MIN_ITER, MAX_ITER), 'duration': ('duration', 'Duration', 1, 2 ** 31 - 1),
           'qp': ('qps', 'num of Qps', 1, 16384), 'mtu': ('mtu', 'MTU', None, None), 'tx-depth': ('tx_depth', 'Tx depth', 1, 16384)}


def parse_args(tool, argv, features):
    params = Params(tool)
    longs = list(LONG_OPTS)
    for feature in sorted(features):
        longs += BUILD_OPTS.get(feature, [])
    try:
        opts, rest = getopt.gnu_getopt(argv, SHORT_OPTS, longs)
    except getopt.GetoptError as exc:
        opt = exc.opt or ''
        if 'requires argument' in exc.msg:
            text = ("%s: option '--%s' requires an argument\n" % (tool, opt) if len(opt) > 1
                    else "%s: option requires an argument -- '%s'\n" % (tool, opt))
        elif len(opt) > 1 or opt == '':
            text = "%s: unrecognized option '--%s'\n" % (tool, opt)
        else:
            text = "%s: invalid option -- '%s'\n" % (tool, opt)
        err(text)
        err(' Invalid Command or flag.\n Please check command line and run again.\n\n')
        usage(params, features)
        raise Exit(FAILURE, ' Parser function exited with Error\n')
    for opt, value in opts:
        name = SHORT_LONG.get(opt, opt.lstrip('-'))
        if name == 'version':
            out('Version: %s\n' % VERSION)
            raise Exit(FAILURE)
        if name == 'help':
            usage(params, features)
            raise Exit(FAILURE)
        if name in SWITCHES:
            setattr(params, SWITCHES[name], True)
        elif name in NUMBERS:
            attr, label, low, high = NUMBERS[name]
            setattr(params, attr, _int(label, value, low, high))
            if name == 'ib-port' and params.ib_port < 1:
                raise Exit(FAILURE, "IB Port can't be less than 1\n")
        elif name == 'ib-dev':
            params.device = value
        elif name == 'source_ip':
            params.source_ip = value
        elif name in ('use_cuda', 'use_rocm', 'use_maca'):
            params.gpu_flag = name
            params.gpu_index = _int(name, value, 0, 1024)
    if params.tst == 'lat' and params.duplex:
        raise Exit(FAILURE, ' Bidirectional mode not supported in latency tests\n Parser function exited with Error\n')
    if params.run_infinitely and params.tst != 'bw':
        raise Exit(FAILURE, ' run_infinitely exists only in BW tests for now.\n Parser function exited with Error\n')
    if params.dmabuf and params.gpu_flag != 'use_cuda':
        raise Exit(FAILURE, ' DMA-BUF mode is supported only with CUDA memory (--use_cuda)\n Parser function exited with Error\n')
    if rest:
        params.server_name = rest[0]
    return params


# ---------------------------------------------------------------------------- the node

class Node(object):
    """What one side reads of its simulated node."""

    def __init__(self, root):
        self.root = root
        self.sysroot = SysRoot(root)

    def devices(self):
        return sorted(self.sysroot.listdir(_ib.IB_CLASS))

    def governor(self):
        return self.sysroot.text('/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor', quiet=True)

    def port(self, device, num):
        base = '%s/%s/ports/%d' % (_ib.IB_CLASS, device, num)
        if not self.sysroot.isdir(base):
            return None
        state = _ib.parse_state(self.sysroot.text(base + '/state', quiet=True))[0]
        gbps = _ib.parse_rate(self.sysroot.text(base + '/rate', quiet=True))[0]
        layer = self.sysroot.text(base + '/link_layer', quiet=True) or 'InfiniBand'
        lid = int(self.sysroot.text(base + '/lid', quiet=True) or '0', 16)
        return {'base': base, 'state': state, 'gbps': gbps or 0.0, 'link': 'Ethernet' if layer == 'Ethernet' else 'IB', 'lid': lid}

    def gid(self, port, index):
        text = self.sysroot.text('%s/gids/%d' % (port['base'], index), quiet=True)
        if not text or set(text.replace(':', '')) <= {'0'}:
            return None
        raw = bytes.fromhex(text.replace(':', ''))
        return list(raw)

    def mtu(self, port, index):
        if port['link'] == 'IB':
            return 4096
        netdev = self.sysroot.text('%s/gid_attrs/ndevs/%d' % (port['base'], max(index, 0)), quiet=True)
        mtu = self.sysroot.text('/sys/class/net/%s/mtu' % netdev, quiet=True) if netdev else None
        return _ib.roce_active_mtu(int(mtu)) if mtu else 1024

    def gpu(self, params, device):
        """(gpu dict, bandwidth factor, failure text or None) of the GPU memory asked for."""
        gdr = _gdr.read_gdr(self.sysroot, _ib.list_rdma_devices(self.sysroot))
        vendor = GPU_VENDOR[params.gpu_flag]
        gpus = [g for g in gdr['gpus'] if g['vendor'] == vendor]
        if params.gpu_index >= len(gpus):
            return None, 0, len(gpus)
        gpu = gpus[params.gpu_index]
        pair = next((p for p in gdr['topology'] if p['gpu'] == gpu['name'] and p['nic'] == device), None)
        factor = GPU_DISTANCE_FACTOR.get(pair['distance'], 0.6) if pair else 0.6
        redirect = [b for b in gdr['acs'] if b.get('redirects_p2p') and pair and b['pci_address'] in pair['bridges']]
        if redirect:
            factor = min(factor, ACS_REDIRECT_FACTOR)
        path = gdr['peer_memory']['paths'].get(vendor, {})
        dmabuf_ok = params.dmabuf and gdr['dmabuf']['possible'] is not False
        gpu = dict(gpu, distance=pair['distance'] if pair else None,
                   # ibv_reg_mr() of GPU memory goes through a registered peer-memory client (what
                   # memory_peers/<client>/version shows): a loaded module without it (seed 000, OFED
                   # built without HAVE_MM_KOBJ_EXPORTED) cannot register; dma-buf needs no client.
                   registrable=bool(path.get('detected')) or dmabuf_ok,
                   dmabuf_possible=gdr['dmabuf']['possible'] is not False)
        return gpu, factor, None


def gpu_name(gpu):
    device_id = int(gpu['device_id'], 16) if gpu.get('device_id') else 0
    if gpu['vendor'] == 'metax':
        return 'MetaX C500'
    return GPU_NAMES.get(device_id, {'nvidia': 'NVIDIA GPU', 'amd': 'AMD Instinct GPU'}.get(gpu['vendor'], 'GPU'))


def bus_of(gpu):
    return int(gpu['pci_address'].split(':')[1], 16)


def init_gpu(params, node, device, buffer_size):
    """ctx_init() GPU part: prints what the real tool prints; (factor, buffer address, free text)."""
    gpu, factor, found = node.gpu(params, device)
    address = random.randrange(0x7f0000000, 0x7ffffffff) << 12
    if params.gpu_flag == 'use_cuda':
        out('initializing CUDA\n')
        if gpu is None:
            if found == 0:
                out('There are no available device(s) that support CUDA\n')
            else:
                err('No such device ID (%d) exists in system\n' % params.gpu_index)
            raise Exit(FAILURE, "Couldn't init GPU context\n Couldn't create IB resources\n")
        nvidia = [g for g in node_gpus(node) if g['vendor'] == 'nvidia']
        out('Listing all CUDA devices in system:\n')
        for index, other in enumerate(nvidia):
            out('CUDA device %d: PCIe address is %02X:%02X\n' % (index, bus_of(other), int(other['pci_address'].split(':')[2][:2], 16)))
        out('\nPicking device No. %d\n' % params.gpu_index)
        out('[pid = %d, dev = %d] device name = [%s]\n' % (os.getpid(), params.gpu_index, gpu_name(gpu)))
        out('creating CUDA Ctx\nmaking it the current CUDA Ctx\n')
        if params.dmabuf and not gpu['dmabuf_possible']:
            raise Exit(FAILURE, "DMA-BUF is not supported on this GPU\n Couldn't create IB resources\n")
        out('cuMemAlloc() of a %d bytes GPU buffer\n' % buffer_size)
        out('allocated GPU buffer address at %016x pointer=%#x\n' % (address, address))
        if params.dmabuf:
            out('using DMA-BUF for GPU buffer address at %#x aligned at %#x with aligned size %d\n' % (address, address, buffer_size))
        free = 'deallocating GPU buffer %016x\ndestroying current CUDA Ctx\n' % address
    else:
        kind = 'ROCm' if params.gpu_flag == 'use_rocm' else 'maca'
        if gpu is None:
            out('Requested %s device %d but found only %d device(s)\n' % (kind, params.gpu_index, found))
            raise Exit(FAILURE, "Couldn't initialize %s device\n Couldn't create IB resources\n" % kind)
        if kind == 'ROCm':
            out('Using ROCm Device with ID: %d, Name: %s, PCI Bus ID: 0x%x, GCN Arch: %d\n'
                % (params.gpu_index, gpu_name(gpu), bus_of(gpu), 942))
            out('allocated %d bytes of GPU buffer at %#x\n' % (buffer_size, address))
        else:
            # The MetaX fork (seed 000 section 4.2).
            out('Using maca Device with ID: %d, Name: %s, PCI Bus ID: 0x%x, metax Arch: xcore1000\n'
                % (params.gpu_index, gpu_name(gpu), bus_of(gpu)))
            out('allocated %d bytes of GPU buffer d_A:%#x\n' % (buffer_size, address))
        free = 'deallocating GPU buffer %#x\n' % address
    if not gpu['registrable']:
        # ibv_reg_mr() of GPU memory without a peer-memory client (nor dma-buf) fails:
        # perftest_resources.c create_single_mr() / create_mr(); main(): ctx_init().
        raise Exit(FAILURE, "Couldn't allocate MR\nFailed to create MR\n Couldn't create IB resources\n")
    return factor, free


def node_gpus(node):
    return _gdr.read_gdr(node.sysroot, [])['gpus']


# ---------------------------------------------------------------------------- the wire

class Peer(object):
    """The out-of-band connection: one JSON object per line."""

    def __init__(self, sock):
        self.sock = sock
        self.reader = sock.makefile('r')

    def send(self, obj):
        try:
            self.sock.sendall((json.dumps(obj) + '\n').encode())
        except OSError:
            raise Exit(FAILURE, " Unable to write to socket/rdma_cm\n Failed to exchange data between server and clients\n")

    def gone(self):
        """Has the peer closed its end (process died)? Looked at without blocking."""
        try:
            readable = select.select([self.sock], [], [], 0)[0]
            return bool(readable) and self.sock.recv(1, socket.MSG_PEEK) == b''
        except OSError:
            return True

    def recv(self):
        try:
            line = self.reader.readline()
        except OSError:
            line = ''
        if not line:
            raise Exit(FAILURE, "ethernet_read_keys: Couldn't read remote address\n Unable to read from socket/rdma_cm\n"
                                " Failed to exchange data between server and clients\n")
        return json.loads(line)


def listen(params):
    address = os.environ.get('GF_SIM_ADDR') or params.source_ip or '0.0.0.0'
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((address, params.port))
    except OSError:
        listener.close()
        raise Exit(FAILURE, "Couldn't listen to port %d\nUnable to open file descriptor for socket connection"
                            " Unable to init the socket connection\n" % params.port)
    listener.listen(1)
    conn, _addr = listener.accept()
    listener.close()
    return conn


def connect(params):
    try:
        infos = socket.getaddrinfo(params.server_name, params.port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        raise Exit(FAILURE, "Problem in resolving basic address and port\nUnable to open file descriptor for socket connection"
                            " Unable to init the socket connection\n")
    source = os.environ.get('GF_SIM_ADDR') or params.source_ip
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            if source:
                sock.bind((source, 0))
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRNOTAVAIL and source:
                raise Exit(FAILURE, 'Failed to bind socket\nUnable to open file descriptor for socket connection'
                                    ' Unable to init the socket connection\n')
    raise Exit(FAILURE, "Couldn't connect to %s:%d\nUnable to open file descriptor for socket connection"
                        " Unable to init the socket connection\n" % (params.server_name, params.port))


# ---------------------------------------------------------------------------- printing

def banner(params, side, port, mtu, features):
    title = TITLES[params.verb] + ' ' + ('Bidirectional ' if params.duplex else '') + ('BW ' if params.tst == 'bw' else 'Latency ')
    lines = [RESULT_LINE, '                    %sTest\n' % title]
    lines.append(' Dual-port       : OFF\t\tDevice         : %s\n' % params.device)
    lines.append(' Number of qps   : %d\t\tTransport type : IB\n' % params.qps)
    lines.append(' Connection type : RC\t\tUsing SRQ      : OFF\n')
    lines.append(' PCIe relax order: %s\n' % ('OFF' if params.pcir_disabled else 'ON'))
    lines.append(' ibv_wr* API     : ON\n')
    if side == 'client' or params.duplex:
        lines.append(' TX depth        : %d\n' % params.tx_depth)
    if params.verb == 'send' and (side == 'server' or params.duplex):
        lines.append(' RX depth        : %d\n' % min(512, params.iters))
    if params.tst == 'bw':
        lines.append(' CQ Moderation   : %d\n' % min(params.cq_mod, params.iters))
    lines.append(' Mtu             : %d[B]\n' % mtu)
    lines.append(' Link type       : %s\n' % port['link'])
    if params.gid_index != -1:
        lines.append(' GID index       : %d\n' % params.gid_index)
    if params.verb == 'read':
        lines.append(' Outstand reads  : %d\n' % 16)
    else:
        lines.append(' Max inline data : %d[B]\n' % (0 if params.tst == 'bw' else LAT_INLINE[params.verb]))
    lines.append(' rdma_cm QPs\t : %s\n' % ('ON' if params.rdma_cm else 'OFF'))
    if 'rocm' in features:
        lines.append(' Use ROCm memory : %s\n' % ('ON' if params.gpu_flag == 'use_rocm' else 'OFF'))
    if 'maca' in features:
        lines.append(' Use MACA memory : %s\n' % ('ON' if params.gpu_flag == 'use_maca' else 'OFF'))
    lines.append(' Data ex. method : %s\n' % ('rdma_cm' if params.rdma_cm else 'Ethernet'))
    lines.append(RESULT_LINE)
    out(''.join(lines))


def address_line(params, side_name, dest, show_gid):
    text = ' %s address: LID %s QPN %s PSN %s' % (side_name, c_hex(dest['lid'], 4), c_hex(dest['qpn'], 6), c_hex(dest['psn'], 6))
    if params.verb == 'read':
        text += ' OUT %s' % c_hex(dest['out_reads'], 4)
    if params.verb in ('read', 'write'):
        text += ' RKey %s VAddr %s' % (c_hex(dest['rkey'], 8), c_hex(dest['vaddr'], 16))
    text += '\n'
    if show_gid and dest.get('gid'):
        text += ' GID: %s\n' % ':'.join('%02d' % b for b in dest['gid'])
    return text


def my_dests(params, port, gid):
    return [{'lid': port['lid'], 'qpn': random.randrange(0x100, 0x10000), 'psn': random.randrange(0, 1 << 24),
             'out_reads': 16, 'rkey': random.randrange(0x1000, 0x200000), 'vaddr': random.randrange(0x7f0000000, 0x7ffffffff) << 12,
             'gid': gid} for _qp in range(params.qps)]


def sizes(params):
    if params.all:
        return [1 << i for i in range(1, 24)]
    return [params.size]


def bw_row(params, size, gbps, iters):
    """(size, iters, peak, avg, msgrate) in the printed unit, as print_report_bw() computes it."""
    rate_cap = size * 8 * MSG_RATE_MPPS * params.qps * 1e6 / 1e9
    plateau = gbps * PLATEAU
    avg = (plateau ** -3 + rate_cap ** -3) ** (-1.0 / 3) * random.uniform(0.997, 1.0)
    if params.duplex:
        avg *= 2 * random.uniform(0.985, 0.995)
    peak = 0.0 if params.no_peak or params.run_infinitely else avg * random.uniform(1.0, 1.004)
    msg_rate = avg * 1e9 / (size * 8) / 1e6
    factor = 1.0 if params.gbits else 1e9 / 8 / 2 ** 20
    return size, iters, peak * factor, avg * factor, msg_rate


def format_bw(params, row):
    size, iters, peak, avg, msg_rate = row
    # print_full_bw_report(): 6 decimals when a Gb/s average is below 0.1.
    fmt = REPORT_FMT_EXT if params.gbits and avg < 0.1 else REPORT_FMT
    return fmt % (size, iters, peak, avg, msg_rate) + '\n'


def lat_row(params, size, gbps, extra_us, iters):
    typical = LAT_BASE_US[params.verb] + extra_us + size * 8 / (gbps * 1e3) * (2 if params.verb == 'read' else 1)
    typical *= random.uniform(0.99, 1.01)
    if params.duration is not None:
        return size, iters, typical * 1.01, 1e6 / typical
    return (size, iters, typical * 0.96, typical * 3.2, typical, typical * 1.01, 0.0, typical * 1.15, typical * 2.4)


def format_lat(params, row):
    if params.duration is not None:
        return REPORT_FMT_LAT_DUR % row + '\n'
    return REPORT_FMT_LAT % row + '\n'


def iterations_for(params, size, gbps):
    if params.duration is None:
        return params.iters
    if params.tst == 'bw':
        return int(gbps * PLATEAU * 1e9 * params.duration / (size * 8))
    return int(params.duration * 1e6 / LAT_BASE_US[params.verb])


def pace(params, plan, gbps):
    """Seconds to sleep per size: the real duration, scaled to stay under the budget."""
    budget = float(os.environ.get('GF_SIM_PERFTEST_MAX_S', '0.5'))
    real = []
    for size, iters in plan:
        if params.duration is not None:
            real.append(float(params.duration))
        elif params.tst == 'bw':
            real.append(iters * size * 8 / (gbps * PLATEAU * 1e9))
        else:
            real.append(iters * (LAT_BASE_US[params.verb] + size * 8 / (gbps * 1e3)) * 2e-6)
    total = sum(real)
    scale = min(1.0, budget / total) if total > 0 else 0.0
    return [t * scale for t in real]


def cpu_warning(params, node, state):
    """get_clock.c proc_get_cpu_mhz(): once, on stderr, when the cores do not run at max."""
    if state.get('warned') or params.cpu_freq_f:
        return
    state['warned'] = True
    governor = node.governor()
    if governor and governor != 'performance':
        err('Conflicting CPU frequency values detected: 1200.000000 != 3000.000000. CPU Frequency is not max.\n')


# ---------------------------------------------------------------------------- the test

def run(params, node, features, side):
    devices = node.devices()
    if not devices:
        raise Exit(FAILURE, NO_DEVICE + ' Unable to find the Infiniband/RoCE device\n')
    if params.device is None:
        params.device = devices[0]
    elif params.device not in devices:
        raise Exit(FAILURE, 'IB device %s not found\n Unable to find the Infiniband/RoCE device\n' % params.device)
    port = node.port(params.device, params.ib_port)
    if port is None:
        raise Exit(FAILURE, " Unable to query port %d attributes\n Couldn't set the link layer\n"
                            " Couldn't get context for the device\n" % params.ib_port)
    if port['state'] != 4:
        raise Exit(FAILURE, " Port number %d state is %s\n Couldn't set the link layer\n Couldn't get context for the device\n"
                   % (params.ib_port, PORT_STATES.get(port['state'], 'Nop')))
    if port['link'] == 'Ethernet' and params.gid_index == -1:
        params.gid_index = 0
    mtu = node.mtu(port, params.gid_index)
    if params.mtu:
        mtu = min(mtu, params.mtu)
    gid = node.gid(port, params.gid_index) if params.gid_index >= 0 else None
    max_size = MAX_SIZE if params.all else params.size
    buffer_size = 2 * max_size * params.qps

    if side == 'server':
        out(WAITING)
        conn = listen(params)
        if os.environ.get('GF_SIM_PERFTEST_HANG') == '1':
            while True:  # accepted, never answers: the client waits in its handshake
                time.sleep(3600)
    else:
        conn = connect(params)
    peer = Peer(conn)
    # The window spec of this end's HCA (tools_window.py): the peer needs it to move its counters (CNPs it sends).
    me = {'tool': params.tool, 'gbps': port['gbps'], 'link': port['link'], 'gpu_factor': 1.0, 'extra_us': 0.0,
          'window': tools_window.spec_of(node.root, params.device)}
    free = ''
    factor = 1.0
    peer.send(me)
    remote = peer.recv()
    if params.gpu_flag:
        factor, free = init_gpu(params, node, params.device, buffer_size)
    else:
        # ibv_reg_mr() pins the buffer against RLIMIT_MEMLOCK (the node's /proc/self/limits):
        # beyond the limit it fails with ENOMEM, and perftest says what it says for GPU memory.
        limit = _host.parse_proc_limits(node.sysroot.text('/proc/self/limits') or '')['soft']
        if isinstance(limit, int) and limit < buffer_size:
            raise Exit(FAILURE, "Couldn't allocate MR\nFailed to create MR\n Couldn't create IB resources\n")
    gbps = min(port['gbps'] * factor, remote['gbps'])
    peer.send({'gpu_factor': factor})
    remote_factor = peer.recv()['gpu_factor']
    gbps = min(gbps, remote['gbps'] * remote_factor)
    extra_us = (1.0 / factor - 1.0) * 0.5 + (1.0 / remote_factor - 1.0) * 0.5 + (0.4 if port['link'] == 'Ethernet' else 0.0)
    banner(params, side, port, mtu, features)

    mine = my_dests(params, port, gid)
    peer.send({'dests': mine})
    theirs = peer.recv()['dests']
    if port['link'] == 'Ethernet' and gid is None:
        # A RoCE GID index with no GID behind it: ibv_modify_qp(RTR) refuses the address
        # vector (perftest_resources.c ctx_connect(); main(): ctx_connect()).
        raise Exit(FAILURE, "Failed to modify QP %d to RTR\n Unable to Connect the HCA's through the link\n" % mine[0]['qpn'])
    show_gid = params.gid_index > -1
    out(''.join(address_line(params, 'local', d, show_gid) for d in mine))
    out(''.join(address_line(params, 'remote', d, show_gid) for d in theirs))
    peer.send({'ready': True})
    peer.recv()

    state = {}
    started = time.time()
    # A retraining link changes speed and width while the test runs (the sequence samples it meanwhile).
    tools_window.during_test(node.root, params.device, step_s=0.6)
    if params.tst == 'lat' and params.verb == 'read' and side == 'server':
        # read_lat.c main(): only the client posts reads; the server waits in
        # ctx_close_connection() for the client's end, then prints the dashes.
        while 'done' not in peer.recv():
            pass
        peer.send({'bye': True})
        out(RESULT_LINE)
        return free
    out(RESULT_LINE)
    if params.tst == 'bw':
        out((RESULT_FMT_G if params.gbits else RESULT_FMT) + '\n')
    else:
        out((RESULT_FMT_LAT if params.duration is None else RESULT_FMT_LAT_DUR) + '\n')

    plan = [(size, iterations_for(params, size, gbps)) for size in sizes(params)]
    # write/read bw: the server prints the client's last row only; read_lat: nothing.
    passive = params.tst == 'bw' and params.verb != 'send' and not params.duplex
    silent = params.tst == 'lat' and params.verb == 'read'
    if side == 'client' and os.environ.get('GF_SIM_PERFTEST_GARBAGE') == '1':
        # A client that dies mid-table (a crash, an OOM kill): a partial row, junk, no end.
        out(' %-10d %-10d 12.3\x00\x7f@@' % (plan[-1][0], plan[-1][1]))
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if side == 'client':
        delays = pace(params, plan, gbps)
        while True:
            for (size, iters), delay in zip(plan, delays):
                time.sleep(delay)
                if peer.gone():
                    # The remote QP went with its process: the requester retries, then
                    # completes in error (IBV_WC_RETRY_EXC_ERR = 12); perftest_resources.h
                    # NOTIFY_COMP_ERROR_SEND, then <tool>.c main().
                    last = ' Failed to complete run_iter_bw function successfully' if params.tst == 'bw' else 'Test exited with Error'
                    raise Exit(FAILURE, ' Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n'
                                        'scnt=%d, ccnt=0\n%s\n' % (iters, last))
                row = bw_row(params, size, gbps, iters) if params.tst == 'bw' else lat_row(params, size, gbps, extra_us, iters)
                cpu_warning(params, node, state)
                out(format_bw(params, row) if params.tst == 'bw' else format_lat(params, row))
                if not passive and not silent:
                    peer.send({'row': row})
            if not params.run_infinitely:
                break
        out(RESULT_LINE)
        if passive:
            peer.send({'final': row})
        # ctx_close_connection(): a last handshake; a server that died shows here.
        peer.send({'done': True})
        peer.recv()
    else:
        while True:
            message = peer.recv()
            if 'done' in message:
                break
            row = message.get('row') or message.get('final')
            cpu_warning(params, node, state)
            out(format_bw(params, tuple(row)) if params.tst == 'bw' else format_lat(params, tuple(row)))
        peer.send({'bye': True})
        out(RESULT_LINE)
    # The data flows from the client (write, send) or to it (read: the server's memory is read); the counters move
    # as this test moved them, on this end (tools_window.py).
    tools_window.after_test(node.root, params.device, remote.get('window'), (side == 'client') != (params.verb == 'read'),
                            max(time.time() - started, 1e-3))
    return free


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    tool = os.path.basename(argv.pop(0)) if argv else ''
    if tool not in ('ib_write_bw', 'ib_read_bw', 'ib_send_bw', 'ib_write_lat', 'ib_read_lat', 'ib_send_lat'):
        err('tools_perftest.py: the first argument names the tool (ib_write_bw, ..., ib_send_lat)\n')
        return 2
    root = os.environ.get('GF_SIM_ROOT')
    if not root or not os.path.isdir(os.path.join(root, 'sys')):
        err('%s (simulator stand-in): GF_SIM_ROOT is not a simulated node root (tests/sim)\n' % tool)
        return FAILURE
    node = Node(root)
    random.seed()
    try:
        features = build_features(node.sysroot)
        params = parse_args(tool, argv, features)
        side = 'client' if params.server_name else 'server'
        free = run(params, node, features, side)
        out(free)
    except Exit as exc:
        if exc.err:
            err(exc.err)
        return exc.code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == '__main__':
    sys.exit(main())
