# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""nccl-tests, rccl-tests and MetaX mccl tests (*_perf): command lines, output parsing
(text table and -J JSON, one result structure), the transport NCCL reports, and failure
classification.

Parsing is pure (``parse_text``, ``parse_json``, ``parse_any``, ``outcome``) and tested on
captured outputs. The text format is that of NVIDIA/nccl-tests src/common.cu (the
'# nThread ...' header, '#  Rank ...' device lines, the result table printed by
PrintHeader / writeResultLine, '# Out of bounds values' and '# Avg bus bandwidth'),
including its older form with an 'error' column instead of '#wrong' and no 'root'
column, rccl-tests' copy of it, and the MCCL tests' form with '# '-prefixed rows.
"""

from __future__ import annotations

import json
import math
import os
import re

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _argv

BENCHMARKS = ('all_reduce_perf', 'all_gather_perf', 'reduce_scatter_perf', 'sendrecv_perf', 'alltoall_perf',
              'broadcast_perf', 'reduce_perf')
LAUNCHERS = ('local', 'mpirun', 'srun')
# INIT and NET print the network, the HCAs, GDR and the connections; ENV the NCCL_* settings NCCL saw
# ('NCCL_P2P_DISABLE set by environment to 1.'); GRAPH the topology NCCL detected ('=== System : maxBw ...
# totalBw ...', 'NVL[...]'), a few dozen lines per rank: only for runs over one node's GPUs, where it gives
# the expectation (plugins/module_utils/_collective.py judge_nodes).
DEBUG_ENV = {'NCCL_DEBUG': 'INFO', 'NCCL_DEBUG_SUBSYS': 'INIT,NET,ENV'}
DEBUG_SUBSYS_LOCAL = 'INIT,NET,ENV,GRAPH'

_HEADER_RE = re.compile(
    r'nThread\s+(?P<threads>\d+)\s+nGpus\s+(?P<gpus>\d+)\s+minBytes\s+(?P<min>\d+)\s+maxBytes\s+(?P<max>\d+)\s+'
    r'step:\s*(?P<step>\d+)\((?P<step_kind>factor|bytes)\)\s+warmup iters:\s*(?P<warmup>\d+)\s+iters:\s*(?P<iters>\d+)'
    r'(?:\s+agg iters:\s*(?P<agg>\d+))?\s+validation:\s*(?P<validation>\d+)(?:\s+graph:\s*(?P<graph>\d+))?')
# '#  Rank  0 Group  0 Pid   1401 on vm device  0 [0000:00:06] NVIDIA H200' (nccl-tests >= 2.13)
# and '# Rank 0 Pid 545654 on mx-sh-demo device 0 [0x08] MetaX C500' (older, and MCCL).
_DEVICE_RE = re.compile(
    r'^#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+'
    r'device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?:(?P<name>\S(?:.*\S)?)\s*)?$')
_TESTS_VERSION_RE = re.compile(r'#\s*nccl-tests version (?P<version>\S+)(?: nccl-headers=(?P<headers>\d+))?(?: nccl-library=(?P<library>\d+))?')
# rccl-tests prints its name misspelt: 'rcccl-tests: Version Unknown'.
_RCCL_VERSION_RE = re.compile(r'^rc+l-tests: Version (?P<version>.*\S)\s*$')
_LIB_VERSION_RE = re.compile(r'\b(?P<lib>[NRM]CCL) version (?P<version>\S+)')
_STARTING_RE = re.compile(r'#\s*Collective test starting: (?P<name>\S+)')
_OOB_RE = re.compile(r'^#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>\w+)')
_INFO_RE = re.compile(r'\b(?P<lib>[NRM]CCL) INFO (?P<text>.*)$')
_USING_NETWORK_RE = re.compile(r'^Using network (?P<net>.*\S)\s*$')
_NET_USING_RE = re.compile(r'^NET/(?P<net>\w+)\s*: Using (?P<devices>.*?)(?:;\s*OOB .*)?$')
# '[0]mlx5_0:1/IB [1]mlx5_3:1/RoCE': device:port, the link layer after the slash left out.
_NET_DEVICE_RE = re.compile(r'\[\d+\](?P<name>[^\s\[;/]+)')
_NET_NO_DEVICE_RE = re.compile(r'^NET/IB\s*: No device found')
# 'NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'' (src/transport/net_ib.cc), older
# 'for HCA 0 : mlx5_0' and 'for GPU 0[0] / HCA 0 (distance 4 > 2)' (no name).
_GDR_HCA_RE = re.compile(r'^NET/(?P<net>\w+)\s*: GPU Direct RDMA (?P<state>Disabled|Enabled) for (?:GPU \S+ / )?HCA \d+'
                         r'(?: \'(?P<quoted>[^\']+)\'| : (?P<plain>[\w.-]+))?')
_GDR_DISABLED_RE = re.compile(r'GPU Direct RDMA Disabled')
_NET_NOTE_RE = re.compile(r'^(?:NET/\w+\s*: No device found|Failed to initialize NET plugin|NET/\w+\s*: GPU Direct RDMA)')
# Connection lines of src/transport.cc and src/graph/connect.cc: 'Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA',
# older 'Channel 00 : 4[84000] -> 3[9000] via P2P/direct pointer' and NCCL 2.4's 'Ring 00 : 26[2] -> 24[0] via P2P/IPC'.
_CONNECT_RE = re.compile(r'^(?:Channel|Ring) \d+(?:/\d+)? : .*? via (?P<via>.*\S)\s*$')
# 'NET/IB/0/GDRDMA', 'NET/IBext_v8/0(7)/GDRDMA' (PXN: NIC 0 for GPU 7), 'NET/AWS Libfabric/1/GDRDMA', 'NET/Socket/0'.
_VIA_NET_RE = re.compile(r'^NET/(?P<net>[^/]+?)/(?P<dev>\d+)(?:\(\d+\))?(?P<gdr>/GDRDMA)?')
_VIA_INTRA = (('P2P', re.compile(r'^P2P/')), ('SHM', re.compile(r'^(?:SHM\b|direct shared memory)')),
              ('NVLS', re.compile(r'^NVLS\b')), ('COLLNET', re.compile(r'^CollNet')))
_NVLS_CHANNELS_RE = re.compile(r'\b(?P<count>\d{1,9}) nvls channels')
# init.cc: 'Connected all rings, use ring PXN 0 GDR 1' - whether the graph uses GPUDirect RDMA.
_RING_GDR_RE = re.compile(r'^Connected all rings.*\bGDR (?P<gdr>[01])\b')
EVIDENCE_MAX = 20

# Who printed a line: NCCL's prefix 'host:pid:tid [cudaDev] NCCL INFO' (src/debug.cc ncclDebugLog; the
# host name cut at its first dot, as nccl-tests' '#  Rank ... on <host>' prints it).
_LINE_HOST_RE = re.compile(r'(?:^|\s)(?P<host>[^\s:\[\]]+):\d+:\d+ \[\d+\] [NRM]CCL INFO ')
# The two ranks of a connection line: '0[0] -> 1[1]' (rank[cudaDev], or rank[busId] before 2.19).
_CONNECT_RANKS_RE = re.compile(r' : (?P<a>\d+)\[[^\]]*\] -> (?P<b>\d+)\[[^\]]*\]')
# init.cc: 'comm 0x... rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0'.
_NNODES_RE = re.compile(r'\bnRanks (?P<ranks>\d+) nNodes (?P<nodes>\d+)\b')
# src/misc/param.cc (NCCL_DEBUG_SUBSYS ENV): 'NCCL_P2P_DISABLE set by environment to 1.' - what NCCL
# saw, whether from the job's environment or /etc/nccl.conf (which NCCL loads into its environment).
_ENV_SET_RE = re.compile(r'^(?P<name>[A-Z][A-Z0-9_]{0,63}) set by environment to (?P<value>.{0,200}?)\.?\s*$')
# src/graph/topo.cc ncclTopoPrint (NCCL_DEBUG_SUBSYS GRAPH): '=== System : maxBw 1.2 totalBw 264.0 ===' and the
# tree below it, '+ NVL[264.0] - NVS/0', '+ PCI[24.0] - GPU/7000 (0)' (tests/fixtures/public/nccl_info/
# nccl_1053_socket_lo_gdr_disabled.txt). totalBw is the largest of the GPUs' own interconnect bandwidth
# (getTotalBw in src/graph/search.cc: the sum of a GPU's NVLink links, else its PCIe link), in GB/s, from
# the hardware NCCL detected: NCCL_P2P_DISABLE changes the paths, not these links.
_SYSTEM_RE = re.compile(r'^=== System : maxBw (?P<max>[\d.]+) totalBw (?P<total>[\d.]+) ===')
_TOPO_LINK_RE = re.compile(r'^\+ (?P<kind>[A-Z]{2,5})\[(?P<bw>[\d.]+)\] - (?P<to>[A-Z]+)/')
# ibvwrap.cc: 'Failed to open libibverbs.so[.1]' - the IB plugin cannot load without rdma-core's libibverbs.
_NO_VERBS_RE = re.compile(r'Failed to open libibverbs')
# init.cc: 'DMA-BUF is available on GPU device 0' - NCCL registers GPU buffers with dma-buf where the NIC can.
_DMABUF_RE = re.compile(r'^DMA-BUF is available on GPU device')
HOSTS_MAX = 4096
# The settings NCCL printed that a run keeps (per host too): NCCL has some 200 parameters, a job sets a few.
ENV_MAX = 128
# Caps on records (the readers cap bytes, _paths.LOG_LIMIT, which is no cap on records): what is
# past a cap is not kept, counted in the parse's ``dropped`` ({'results': n, ...}) and named in
# ``problems`` (the run is then judged on what was kept, and says so).
# - Ranks: one per GPU. An InfiniBand subnet has at most 0xBFFF unicast LIDs (IBTA Vol 1,
#   4.1.3), one per NIC port, and a GPU node has one NIC per GPU: 65,536 ranks is more than
#   one fabric holds.
RANKS_MAX = 65536
# - Result rows: one per message size and collective. A sweep doubling from 8 B to 16 GiB
#   (-b 8 -e 16G -f 2) is 32 rows; a linear one (-i) of 4,096 steps is longer than any run a
#   fabric test makes, and each row is read twice (out of place, in place).
RESULTS_MAX = 4096
# - Lines that could not be read, listed with why (each names one line): the first few tell.
PROBLEMS_MAX = 50
# - A rank's host, bus id and device name: a host name is at most 253 characters (RFC 1035 2.3.4);
#   a longer field is cut there, so that the rank cap bounds the result too.
HOST_TEXT_MAX = 255


def _keep(records, item, cap, parsed, kind):
    """Append ``item`` to ``records`` while it holds fewer than ``cap``, else count it in parsed['dropped']."""
    if len(records) < cap:
        records.append(item)
        return True
    parsed.setdefault('dropped', {})[kind] = parsed.get('dropped', {}).get(kind, 0) + 1
    return False


def _dropped_problems(parsed):
    """One entry at the end of ``problems`` per kind of record dropped past its cap. Where the list is full, the
    last problems give way to the notes and are counted as dropped problems too: no note overwrites another."""
    caps = {'ranks': RANKS_MAX, 'results': RESULTS_MAX, 'problems': PROBLEMS_MAX}
    dropped = parsed.get('dropped') or {}
    kinds = sorted(dropped)
    if not kinds:
        return
    overflow = len(parsed['problems']) + len(kinds) - PROBLEMS_MAX
    if overflow > 0 and 'problems' not in dropped:
        kinds = sorted(kinds + ['problems'])
        overflow += 1
    if overflow > 0:
        del parsed['problems'][len(parsed['problems']) - overflow:]
        dropped['problems'] = dropped.get('problems', 0) + overflow
    for kind in kinds:
        parsed['problems'].append({'line': None, 'text': kind, 'reason': '%d more %s past the first %d not kept (module_utils/_nccl.py %s_MAX)'
                                   % (dropped[kind], kind, caps.get(kind, 0), kind.upper())})


# First kind that matches wins (a missing binary is also a failed launch); each (kind, pattern) names what failed. Texts: Open MPI
# help-ras-base.txt / help-orte-rmaps-base.txt ('not enough slots'), Open MPI
# help-orterun.txt ('was unable to launch', 'could not find an executable'), Slurm
# srun ('execve(): ... No such file or directory'), nccl-tests common.cu
# (NCCLCHECK -> 'Test NCCL failure', 'Invalid number of GPUs', CUDACHECK -> 'Cuda failure').
FAILURE_RULES = (
    ('missing_binary', re.compile(r'unable to find the (?:specified )?executable|could not find an executable|execvp error on file|'
                                  r'execve\(\): .*No such file or directory|: command not found|'
                                  r'^\S*_perf: No such file or directory')),
    ('launch_failed', re.compile(r'There are not enough slots available in the system|'
                                 r'(?:mpirun|prterun|ORTE|PRTE) (?:was unable to (?:launch|start)|does not know how to)|'
                                 r'ssh: connect to host|ssh: Could not resolve hostname|Host key verification failed|'
                                 r'srun: error: (?:Unable to allocate|Unable to create step)|'
                                 r'An ORTE daemon has unexpectedly failed')),
    ('invalid_usage', re.compile(r'Invalid number of GPUs|invalid option|unrecognized option|Invalid value|'
                                 r'invalid (?:type|redop|operation)')),
    ('nccl_init_failed', re.compile(r'Test NCCL failure|NCCL WARN|[NRM]CCL failure|ncclCommInitRank.*failed|'
                                    r'unhandled (?:system|cuda) error|ncclInternalError|ncclSystemError')),
    ('gpu_failed', re.compile(r'Cuda failure|CUDA failure|HIP failure|hip failure|no CUDA-capable device')),
)
FAILURE_KINDS = tuple(kind for kind, _pattern in FAILURE_RULES) + (
    'data_corruption', 'truncated', 'exit_status', 'timeout', 'unparsed')

_SIZE_SUFFIX = {'': 1, 'K': 1024, 'M': 1024 ** 2, 'G': 1024 ** 3, 'T': 1024 ** 4}


def parse_size(value):
    """nccl-tests size argument ('8', '1K', '64M', '1G'; common.cu parsesize) -> bytes, or None."""
    # 20 digits hold any size_t; more is no size (and past Python's int digit limit, a ValueError).
    # The blanks around it stripped first: '\s*' after an optional suffix and before '\s*$' would
    # try every split of a run of blanks (quadratic on a long value).
    match = re.match(r'^(\d{1,20})\s*([KMGT]?)B?$', str(value).strip(' \t\n\r\x0b\x0c'), re.I | re.A)
    if not match:
        return None
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2).upper()]


def _int(token):
    try:
        return int(token)
    except (TypeError, ValueError, OverflowError):
        return None


def _float(token):
    """A finite float, or None ('N/A', '-', 'inf', 'nan', 1e999, a number of hundreds of digits)."""
    try:
        value = float(token)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _wrong(token):
    """'#wrong' cell: an int, or None where the tool printed N/A (validation off).
    rccl-tests marks cells over its threshold with an asterisk."""
    token = token.rstrip('*')
    return _int(token)


def _empty():
    return {
        'benchmark': None, 'header': {}, 'ranks': [], 'hosts': [],
        'versions': {'tool': None, 'tests': None, 'headers': None, 'library': None, 'library_version': None},
        'results': [], 'avg_busbw_gbs': None, 'max_busbw_gbs': None, 'out_of_bounds': None, 'wrong_total': None,
        'transport': {'net': None, 'net_name': None, 'hcas': [], 'gdr': None, 'intra': [], 'evidence': [],
                      'env': {}, 'env_by_host': {}, 'nnodes': None, 'intra_by_host': {}, 'topology': {}, 'ib_unavailable': None,
                      'dmabuf_available': None},
        'format': None, 'columns': None, 'complete': False, 'failure': None, 'problems': [],
    }


def _header(match):
    # _int, not int: a damaged log can hold a number past Python's int digit limit (ValueError).
    header = {
        'threads': _int(match.group('threads')), 'gpus': _int(match.group('gpus')),
        'min_bytes': _int(match.group('min')), 'max_bytes': _int(match.group('max')),
        'step_factor': None, 'step_bytes': None,
        'warmup_iters': _int(match.group('warmup')), 'iters': _int(match.group('iters')),
        'agg_iters': _int(match.group('agg')), 'validation': _int(match.group('validation')),
        'graph': _int(match.group('graph')),
    }
    header['step_factor' if match.group('step_kind') == 'factor' else 'step_bytes'] = _int(match.group('step'))
    return header


# Launcher prefixes, stripped before anything else is read: Open MPI --tag-output / orte_tag_output
# ('[1,0]<stdout>:', '[1,12]<stderr>:', Open MPI orterun's output filter), Slurm 'srun --label'
# (' 0: ', srun's --label pads the task id), and a bare rank label '[0] ' put in front of NCCL's
# own 'host:pid:tid [dev]' prefix (https://github.com/NVIDIA/nccl/issues/1453). NCCL's own prefix
# is left alone: the INFO/WARN patterns read through it.
_MPI_TAG_RE = re.compile(r'\[\d+,\d+\]<std(?:out|err|diag)>:')
_SRUN_LABEL_RE = re.compile(r'^\s*\d+:(?:\s|$)')
_RANK_LABEL_RE = re.compile(r'^\[\d+\](?:\s+|$)')


def split_launcher_lines(text):
    """[(line number, line without launcher prefixes)]. Ranks writing at once can leave an
    Open MPI tag in the middle of a line: the text after it is a line of its own."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        pieces = _MPI_TAG_RE.split(raw)
        if len(pieces) > 1 and not pieces[0].strip():
            pieces = pieces[1:]
        for piece in pieces:
            for _strip in range(3):  # stacked prefixes: '[0] ' behind a tag, a label behind a label
                stripped = _SRUN_LABEL_RE.sub('', piece, count=1)
                stripped = _RANK_LABEL_RE.sub('', stripped, count=1)
                if stripped == piece:
                    break
                piece = stripped
            out.append((number, piece))
    return out


# Column layouts by field count, for rows read without their column-name line (an excerpt):
# nccl-tests common.cu PrintHeader - 'size count type redop root' + 2 x 'time algbw busbw #wrong' (13),
# the older form without 'root' and with 'error' (12), and the old broadcast/reduce form with 'root'
# but no 'redop' (11).
_INFERRED = {13: ('redop', 'root'), 12: ('redop',), 11: ('root',)}
_TYPE_RE = re.compile(r'^[A-Za-z_][\w]*$')
TEXT_MAX = 120


def _columns(tokens):
    """The table's column header ('size count type redop [root] time algbw busbw #wrong|error ...')."""
    if len(tokens) < 8 or tokens[0] != 'size' or 'count' not in tokens or 'busbw' not in tokens or 'time' not in tokens:
        return None
    fixed = tokens[:tokens.index('time')]
    return {'root': 'root' in fixed, 'redop': 'redop' in fixed, 'check': 'error' if 'error' in tokens else 'wrong',
            'source': 'header'}


def _inferred_columns(tokens):
    """Columns of a row met before any column-name line, from its number of fields."""
    names = _INFERRED.get(len(tokens))
    if names is None:
        return None
    check = tokens[-1].rstrip('*')
    # The old form's 'error' cell is a float ('2e-07', '0e+00') or N/A; '#wrong' is an int.
    old = len(tokens) == 12 or 'root' not in names or not re.match(r'^-?\d+$', check)
    return {'root': 'root' in names, 'redop': 'redop' in names, 'check': 'error' if old and len(tokens) != 13 else 'wrong',
            'source': 'inferred'}


def _width(columns):
    return 3 + int(columns['redop']) + int(columns['root']) + 8


def _looks_like_row(tokens):
    """size and count integers and a type name: a result row, readable or not."""
    return (len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit() and _TYPE_RE.match(tokens[2]) is not None)


def _side(values, check):
    side = {'time_us': _float(values[0]), 'algbw_gbs': _float(values[1]), 'busbw_gbs': _float(values[2]),
            'wrong': None, 'error': None}
    if check == 'error':  # old nccl-tests: the max relative error, a float
        side['error'] = _float(values[3])
    else:
        side['wrong'] = _wrong(values[3])
    return side


def _row(tokens, columns):
    """(row, None) or (None, why it cannot be read)."""
    width = _width(columns)
    if len(tokens) != width:
        return None, 'a result row has %d fields, the table has %d columns' % (len(tokens), width)
    size, count = _int(tokens[0]), _int(tokens[1])
    if size is None or count is None:
        return None, 'size or count is not an integer'
    fixed = width - 8
    sides = (_side(tokens[fixed:fixed + 4], columns['check']), _side(tokens[fixed + 4:fixed + 8], columns['check']))
    if any(side['time_us'] is None or side['busbw_gbs'] is None for side in sides):
        return None, 'time or busbw is not a finite number'
    position = 3
    redop = None
    if columns['redop']:
        redop = tokens[position]
        position += 1
    root = _int(tokens[position]) if columns['root'] else None
    return {'size_bytes': size, 'count': count, 'type': tokens[2], 'redop': redop, 'root': root,
            'out_of_place': sides[0], 'in_place': sides[1]}, None


def _problem(number, text, reason):
    text = text.strip()
    if len(text) > TEXT_MAX:
        text = text[:TEXT_MAX] + '...'
    return {'line': number, 'text': text, 'reason': reason}


def _is_ib(net):
    # The IB verbs transport and its plugin builds (HPC-X 'IBext', 'IBext_v8'; nccl issue 988, 1453).
    return net is not None and net.upper().startswith('IB')


def _transport(info_lines):
    """The network NCCL used, its HCAs and whether GPUDirect RDMA was, from INFO lines
    (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET): 'Using network IB', 'NET/IB : Using
    [0]mlx5_0:1/IB ...', 'GPU Direct RDMA Disabled for HCA 1 'mlx5_1'', the connection lines
    ('via NET/IB/0/GDRDMA', 'via NET/Socket/0', 'via P2P/IPC', 'via SHM') and
    'Connected all rings, use ring PXN 0 GDR 1'."""
    transport = {'net': None, 'net_name': None, 'hcas': [], 'gdr': None, 'intra': [], 'evidence': []}
    seen = set()
    gdr_used = gdr_disabled = False
    ring_gdr = None
    using_network = channel_net = None
    ib_using = ib_missing = socket_using = False

    def note(line, key):
        if key not in seen and len(transport['evidence']) < EVIDENCE_MAX:
            seen.add(key)
            transport['evidence'].append(line.strip())

    def add_hca(name):
        if name and not any(hca.split(':')[0] == name.split(':')[0] for hca in transport['hcas']):
            transport['hcas'].append(name)

    def add_intra(kind):
        if kind not in transport['intra']:
            transport['intra'].append(kind)

    for line, text in info_lines:
        match = _USING_NETWORK_RE.match(text)
        if match:
            using_network = using_network or match.group('net')
            note(line, text)
            continue
        match = _NET_USING_RE.match(text)
        if match:
            if match.group('net') == 'Socket':
                socket_using = True
            else:
                ib_using = ib_using or _is_ib(match.group('net'))
                for device in _NET_DEVICE_RE.findall(match.group('devices')):
                    add_hca(device)
            note(line, text)
            continue
        match = _GDR_HCA_RE.match(text)
        if match:
            if match.group('state') == 'Disabled':
                gdr_disabled = True
            else:
                gdr_used = True
            if match.group('net') != 'Socket':  # a socket interface is no HCA ('lo', 'eth0')
                add_hca(match.group('quoted') or match.group('plain'))
            note(line, text)
            continue
        if _GDR_DISABLED_RE.search(text):
            gdr_disabled = True
            note(line, text)
            continue
        if _NET_NO_DEVICE_RE.match(text):
            ib_missing = True
            note(line, text)
            continue
        match = _CONNECT_RE.match(text)
        if match:
            via = match.group('via')
            net = _VIA_NET_RE.match(via)
            if net:
                channel_net = channel_net or net.group('net')
                if net.group('gdr'):
                    gdr_used = True
                note(line, re.sub(r'^(?:Channel|Ring) \d+(?:/\d+)? : ', '', text))
                continue
            for kind, pattern in _VIA_INTRA:
                if pattern.match(via):
                    add_intra(kind)
                    note(line, 'intra:' + kind)
                    break
            continue
        match = _NVLS_CHANNELS_RE.search(text)
        if match and (_int(match.group('count')) or 0) > 0:
            add_intra('NVLS')
            note(line, 'intra:NVLS')
            continue
        match = _RING_GDR_RE.match(text)
        if match:
            ring_gdr = match.group('gdr') == '1'
            continue
        if _NET_NOTE_RE.match(text):
            note(line, text)
    name = using_network or channel_net
    if name is None and ib_using:
        name = 'IB'  # NCCL tries IB first (src/net.cc); old releases print no 'Using network' line
    elif name is None and ib_missing and socket_using:
        name = 'Socket'  # 'NET/IB : No device found.' then 'NET/Socket : Using ...': the fallback
    transport['net_name'] = name
    transport['net'] = 'IB' if _is_ib(name) else name
    # One rank without GDR is enough to drag the ring down: 'Disabled' anywhere wins.
    if gdr_disabled:
        transport['gdr'] = False
    elif gdr_used:
        transport['gdr'] = True
    elif ring_gdr is not None and transport['net'] not in (None, 'Socket'):
        transport['gdr'] = ring_gdr  # only meaningful when the rings cross a network
    return transport


def _number(token):
    value = _float(token)
    return value if value is not None and 0 <= value < 1e7 else None


def _keep_env(evidence, host, name, value):
    """A setting NCCL printed: in every rank's lines merged (the first value of a name wins), and per host: NCCL
    prints a setting once per process (a cached parameter, src/misc/param.cc), so each node of a run over several
    says what it used."""
    if len(evidence['env']) < ENV_MAX:
        evidence['env'].setdefault(name, value)
    if host is not None and (host in evidence['env_by_host'] or len(evidence['env_by_host']) < HOSTS_MAX):
        own = evidence['env_by_host'].setdefault(host, {})
        if len(own) < ENV_MAX:
            own.setdefault(name, value)


def gpu_evidence(info_lines, ranks=None):
    """What NCCL says about the GPUs of each node and the run's settings, from INFO lines:
    {env, env_by_host: {host: {NAME: value}}, nnodes, intra_by_host: {host: {P2P|SHM|NVLS|COLLNET|NET: connections between two ranks of that
    host, via: [first transports seen]}}, topology: {host: {total_bw_gbs, max_bw_gbs, links, nvlink_gbs}},
    ib_unavailable, dmabuf_available}.

    ``ranks``: the benchmark's rank table (nccl-tests '#  Rank N ... on <host>'), which says which
    host each rank of a connection line ran on; a single-node run (nNodes 1) needs no table."""
    host_of = {}
    for rank in ranks or []:
        if isinstance(rank, dict) and isinstance(rank.get('rank'), int) and rank.get('host'):
            host_of[rank['rank']] = rank['host']
    evidence = {'env': {}, 'env_by_host': {}, 'nnodes': None, 'intra_by_host': {}, 'topology': {}, 'ib_unavailable': None,
                'dmabuf_available': None}
    for line, text in info_lines:
        match = _LINE_HOST_RE.search(line)
        host = match.group('host') if match else None
        match = _ENV_SET_RE.match(text)
        if match:
            _keep_env(evidence, host, match.group('name'), match.group('value').strip())
            continue
        match = _NNODES_RE.search(text)
        if match and text.startswith('comm '):
            evidence['nnodes'] = max(evidence['nnodes'] or 0, _int(match.group('nodes')) or 0) or None
            continue
        match = _CONNECT_RE.match(text)
        if match:
            ends = _CONNECT_RANKS_RE.search(text)
            if not ends:
                continue
            a, b = _int(ends.group('a')), _int(ends.group('b'))
            if host_of:
                same = host_of.get(a) is not None and host_of.get(a) == host_of.get(b)
                where = host_of.get(a) if same else None
            else:
                where = host if evidence['nnodes'] == 1 else None
            if where is None or (where not in evidence['intra_by_host'] and len(evidence['intra_by_host']) >= HOSTS_MAX):
                continue
            via = match.group('via')
            kind = 'NET' if via.startswith('NET/') else next((k for k, pattern in _VIA_INTRA if pattern.match(via)), None)
            if kind is None:
                continue
            seen = evidence['intra_by_host'].setdefault(where, {'via': []})
            seen[kind] = seen.get(kind, 0) + 1
            short = '/'.join(via.split()[0].split('/')[:2])
            if short not in seen['via'] and len(seen['via']) < 4:
                seen['via'].append(short)
            continue
        if host is None or (host not in evidence['topology'] and len(evidence['topology']) >= HOSTS_MAX):
            pass
        else:
            match = _SYSTEM_RE.match(text)
            if match:
                topo = evidence['topology'].setdefault(host, {'total_bw_gbs': None, 'max_bw_gbs': None, 'links': [],
                                                              'nvlink_gbs': None})
                topo['total_bw_gbs'] = max(topo['total_bw_gbs'] or 0, _number(match.group('total')) or 0) or None
                topo['max_bw_gbs'] = max(topo['max_bw_gbs'] or 0, _number(match.group('max')) or 0) or None
                continue
            match = _TOPO_LINK_RE.match(text)
            if match and host in evidence['topology']:
                topo = evidence['topology'][host]
                kind = match.group('kind')
                if kind not in topo['links'] and len(topo['links']) < 8:
                    topo['links'].append(kind)
                if kind == 'NVL' and match.group('to') in ('GPU', 'NVS'):
                    topo['nvlink_gbs'] = max(topo['nvlink_gbs'] or 0, _number(match.group('bw')) or 0) or None
                continue
        if _NO_VERBS_RE.search(text):
            evidence['ib_unavailable'] = {'reason': 'libibverbs', 'line': line.strip()[:TEXT_MAX]}
        elif _NET_NO_DEVICE_RE.match(text) and not evidence['ib_unavailable']:
            evidence['ib_unavailable'] = {'reason': 'no_device', 'line': line.strip()[:TEXT_MAX]}
        elif _DMABUF_RE.match(text):
            evidence['dmabuf_available'] = True
    if evidence['env'].get('NCCL_IB_DISABLE') == '1' and not evidence['ib_unavailable']:
        evidence['ib_unavailable'] = {'reason': 'disabled', 'line': 'NCCL_IB_DISABLE set by environment to 1'}
    return evidence


def find_failure(lines):
    """The first line naming a known failure, as {kind, message, lines}, or None."""
    for kind, pattern in FAILURE_RULES:
        for index, line in enumerate(lines):
            if pattern.search(line):
                context = [text.strip() for text in lines[index:index + 3] if text.strip() and not text.startswith('#')]
                return {'kind': kind, 'message': line.strip(), 'lines': context or [line.strip()]}
    return None


def summarize(parsed):
    """avg is the tool's; max and the #wrong total are over both placements of every size."""
    results = parsed['results']
    busbw = [row[side]['busbw_gbs'] for row in results for side in ('out_of_place', 'in_place')
             if row[side]['busbw_gbs'] is not None]
    parsed['max_busbw_gbs'] = max(busbw) if busbw else None
    wrongs = [row[side]['wrong'] for row in results for side in ('out_of_place', 'in_place') if row[side]['wrong'] is not None]
    parsed['wrong_total'] = sum(wrongs) if wrongs else None
    parsed['hosts'] = []
    seen = set()      # a list's 'in' over RANKS_MAX ranks of as many hosts is quadratic
    for rank in parsed['ranks']:
        if rank['host'] not in seen:
            seen.add(rank['host'])
            parsed['hosts'].append(rank['host'])
    return parsed


_AVG_LINE_RE = re.compile(r'^#\s*Avg bus bandwidth\s*(?::\s*)?(?:(?P<value>\S(?:.*\S)?)\s*)?$')
_HEADER_LINE_RE = re.compile(r'^#?\s*nThread\b')


def parse_text(stdout, stderr=''):
    """Parse the text output of a *_perf binary (with any launcher and NCCL INFO noise)."""
    parsed = _empty()
    parsed['format'] = 'text'
    text = (stdout or '') + ('\n' + stderr if stderr else '')
    numbered = split_launcher_lines(text)
    lines = [line for _number, line in numbered]
    info = []
    columns = None
    last_row = None
    for position, (number, line) in enumerate(numbered):
        stripped = line.strip()
        match = _INFO_RE.search(line)
        if match:
            info.append((line, match.group('text').strip()))
            lib = _LIB_VERSION_RE.search(match.group('text'))
            if lib and parsed['versions']['library_version'] is None:
                parsed['versions']['library_version'] = lib.group('version')
            if parsed['versions']['tool'] is None and match.group('lib') == 'MCCL':
                parsed['versions']['tool'] = 'mccl-tests'
            continue
        # The header and device lines lose their '#' when pasted as markdown (nccl-tests issue 249).
        match = _HEADER_RE.search(stripped)
        if match and _HEADER_LINE_RE.match(stripped):
            parsed['header'] = _header(match)
            continue
        match = _DEVICE_RE.match(stripped if stripped.startswith('#') else '#' + stripped)
        if match:
            _keep(parsed['ranks'], {'rank': _int(match.group('rank')), 'group': _int(match.group('group')),
                                    'pid': _int(match.group('pid')), 'host': match.group('host')[:HOST_TEXT_MAX],
                                    'device': _int(match.group('device')), 'bus_id': match.group('bus')[:HOST_TEXT_MAX],
                                    'name': (match.group('name') or '')[:HOST_TEXT_MAX]}, RANKS_MAX, parsed, 'ranks')
            continue
        match = _TESTS_VERSION_RE.match(stripped)
        if match:
            parsed['versions'].update(tool='nccl-tests', tests=match.group('version'), headers=_int(match.group('headers')),
                                      library=_int(match.group('library')))
            continue
        match = _RCCL_VERSION_RE.match(stripped)
        if match:
            parsed['versions'].update(tool='rccl-tests', tests=match.group('version'))
            continue
        match = _STARTING_RE.match(stripped)
        if match:
            parsed['benchmark'] = match.group('name')
            continue
        match = _AVG_LINE_RE.match(stripped)
        if match:
            value = match.group('value').split()[0] if match.group('value') else ''
            if _float(value) is None:
                _keep(parsed['problems'], _problem(number, stripped, 'the average line holds no finite number'), PROBLEMS_MAX, parsed, 'problems')
            else:
                parsed['avg_busbw_gbs'] = float(value)
                parsed['complete'] = True
            continue
        match = _OOB_RE.match(stripped)
        if match:
            count = _int(match.group('count'))
            if count is None:
                _keep(parsed['problems'], _problem(number, stripped, 'the out of bounds count is not a readable integer'), PROBLEMS_MAX, parsed, 'problems')
            else:
                parsed['out_of_bounds'] = {'count': count, 'ok': match.group('verdict') == 'OK'}
            continue
        if not stripped.startswith('#'):
            lib = _LIB_VERSION_RE.match(stripped)  # 'NCCL version 2.16.2+cuda11.6' printed by rank 0
            if lib and parsed['versions']['library_version'] is None:
                parsed['versions']['library_version'] = lib.group('version')
                continue
        tokens = stripped.lstrip('#').split()
        found = _columns(tokens)
        if found is not None:
            columns = parsed['columns'] = found
            continue
        if not _looks_like_row(tokens):
            continue
        if columns is None:
            columns = _inferred_columns(tokens)
            if columns is None:
                _keep(parsed['problems'], _problem(number, stripped, 'a result row of %d fields without a column header'
                                                   % len(tokens)), PROBLEMS_MAX, parsed, 'problems')
                continue
            parsed['columns'] = columns
        row, why = _row(tokens, columns)
        if row is None:
            _keep(parsed['problems'], _problem(number, stripped, why), PROBLEMS_MAX, parsed, 'problems')
            continue
        _keep(parsed['results'], row, RESULTS_MAX, parsed, 'results')
        last_row = position
    parsed['transport'] = _transport(info)
    parsed['transport'].update(gpu_evidence(info, parsed['ranks']))
    if not parsed['transport']['ib_unavailable'] or parsed['transport']['ib_unavailable']['reason'] != 'libibverbs':
        # ibvwrap.cc prints it as a warning: 'misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]'.
        missing = next((line for line in lines if _NO_VERBS_RE.search(line)), None)
        if missing:
            parsed['transport']['ib_unavailable'] = {'reason': 'libibverbs', 'line': missing.strip()[:TEXT_MAX]}
    # A run that printed its Avg line finished: a stray 'NCCL WARN' before it was not fatal. Nor was
    # one before a result row: the benchmark went on ('Failed to open libibverbs', nccl-tests issue 82).
    if not parsed['complete']:
        parsed['failure'] = find_failure(lines[last_row + 1:] if last_row is not None else lines)
    _dropped_problems(parsed)
    return summarize(parsed)


def _json_side(side, validation):
    # The text table prints time and bandwidths with two decimals (common.cu
    # writeResultLine '%7.2f' / '%6.2f'); rounding the same way makes -J and text runs
    # give the same numbers, whichever path the module took.
    wrong = side.get('nwrong')
    wrong = int(wrong) if _json_number(wrong) and wrong >= 0 and validation != 0 else None
    values = dict((key, side.get(key)) for key in ('time', 'alg_bw', 'bus_bw'))
    for key, value in values.items():
        if not _json_number(value):
            raise ValueError('%s is %r, not a finite number' % (key, value))
    return {'time_us': round(float(values['time']), 2), 'algbw_gbs': round(float(values['alg_bw']), 2),
            'busbw_gbs': round(float(values['bus_bw']), 2), 'wrong': wrong, 'error': None}


def _json_number(value):
    """A number that is a finite float: JSON integers have no bound, and 10**400 is no
    bandwidth (math.isfinite and float() raise OverflowError on it)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _json_text(value):
    """A text field of a -J document as the text parser keeps it (a string, capped at HOST_TEXT_MAX), else None:
    a host name that is an object or a list would otherwise reach the report (and the set of hosts) as one."""
    return value[:HOST_TEXT_MAX] if isinstance(value, str) else None


def _json_int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_dict(value):
    return value if isinstance(value, dict) else {}


def _library_version(code):
    """NCCL_VERSION_CODE (22809 = 2.28.9, 2708 = 2.7.8; nccl.h: major*10000+minor*100+patch from 2.9)."""
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0 or code >= 10 ** 7:
        return None
    if code >= 10000:
        return '%d.%d.%d' % (code // 10000, code // 100 % 100, code % 100)
    return '%d.%d.%d' % (code // 1000, code // 100 % 10, code % 100)


def _json_row(row, validation):
    if not isinstance(row, dict):
        raise ValueError('not an object')
    for key in ('size', 'count'):
        if _json_int(row.get(key)) is None or row[key] < 0:
            raise ValueError('%s is %r, not a non-negative integer' % (key, row.get(key)))
    sides = {}
    for key in ('out_of_place', 'in_place'):
        if not isinstance(row.get(key), dict):
            raise ValueError('%s is %r, not an object' % (key, row.get(key)))
        try:
            sides[key] = _json_side(row[key], validation)
        except ValueError as exc:
            raise ValueError('%s.%s' % (key, exc))

    def text(value):
        return value if isinstance(value, str) else None

    return {'size_bytes': row['size'], 'count': row['count'], 'type': text(row.get('type')), 'redop': text(row.get('redop')),
            'root': _int(str(row.get('root', '')).strip()) if isinstance(row.get('root', ''), (int, str)) else None,
            'out_of_place': sides['out_of_place'], 'in_place': sides['in_place']}


def parse_json(text):
    """Parse the -J output of nccl-tests (JSON 'version' 3) into the structure of parse_text.
    Whatever the document holds, a wrong type or an unreadable number is a problem naming its
    field, never an exception."""
    parsed = _empty()
    parsed['format'] = 'json'
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # includes numbers over the int digit limit
        parsed['failure'] = {'kind': 'unparsed', 'message': 'not JSON: %s' % exc, 'lines': []}
        return parsed
    if not isinstance(doc, dict) or not isinstance(doc.get('results'), list):
        parsed['failure'] = {'kind': 'unparsed', 'message': 'JSON without a results list', 'lines': []}
        return parsed
    config = _json_dict(doc.get('config'))
    args = doc.get('args')
    if isinstance(args, list) and args and isinstance(args[0], str):
        parsed['benchmark'] = os.path.basename(args[0])
    parsed['header'] = dict((name, _json_int(config.get(key))) for name, key in (
        ('threads', 'nthreads'), ('gpus', 'ngpus'), ('min_bytes', 'minimum_bytes'), ('max_bytes', 'maximum_bytes'),
        ('step_factor', 'step_factor'), ('step_bytes', 'step_bytes'), ('warmup_iters', 'warmup_iters'),
        ('iters', 'iterations'), ('agg_iters', 'aggregated_iterations'), ('validation', 'validation'), ('graph', 'graph')))
    devices = config.get('devices') if isinstance(config.get('devices'), list) else []
    for index, device in enumerate(devices):
        if not isinstance(device, dict):
            _keep(parsed['problems'], {'line': None, 'text': 'config.devices[%d]' % index, 'reason': 'not an object'},
                  PROBLEMS_MAX, parsed, 'problems')
            continue
        _keep(parsed['ranks'], {'rank': _json_int(device.get('rank')), 'group': _json_int(device.get('group')),
                                'pid': _json_int(device.get('pid')), 'host': _json_text(device.get('hostname')),
                                'device': _json_int(device.get('device')), 'bus_id': _json_text(device.get('device_hex')),
                                'name': _json_text(device.get('device_info'))}, RANKS_MAX, parsed, 'ranks')
    code = doc.get('nccl_version')
    parsed['versions'].update(tool='nccl-tests', library=_json_int(code), library_version=_library_version(code))
    validation = config.get('validation')
    for index, row in enumerate(doc['results']):
        if len(parsed['results']) >= RESULTS_MAX:
            _keep(parsed['results'], None, RESULTS_MAX, parsed, 'results')
            continue
        try:
            parsed['results'].append(_json_row(row, validation))
        except ValueError as exc:
            _keep(parsed['problems'], {'line': None, 'text': 'results[%d]' % index, 'reason': str(exc)[:TEXT_MAX]},
                  PROBLEMS_MAX, parsed, 'problems')
    oob = doc.get('out_of_bounds')
    if isinstance(oob, dict) and 'count' in oob:
        if _json_int(oob['count']) is None:
            parsed['problems'].append({'line': None, 'text': 'out_of_bounds.count', 'reason': 'not an integer'})
        else:
            parsed['out_of_bounds'] = {'count': oob['count'], 'ok': str(oob.get('okay')).lower() == 'true'}
    avg = doc.get('average_bus_bandwidth')
    if isinstance(avg, dict) and 'bandwidth' in avg:
        if _json_number(avg['bandwidth']):
            # The text prints it with '%g' (six significant digits): 87.640711 -> 87.6407.
            parsed['avg_busbw_gbs'] = float('%g' % avg['bandwidth'])
            parsed['complete'] = True
        else:
            parsed['problems'].append({'line': None, 'text': 'average_bus_bandwidth.bandwidth',
                                       'reason': 'not a finite number'})
    errors = doc.get('errors') if isinstance(doc.get('errors'), list) else []
    errors = [str(error).strip() for error in errors if str(error).strip()]
    if errors:
        parsed['failure'] = find_failure(errors) or {'kind': 'nccl_init_failed', 'message': errors[0], 'lines': errors[:PROBLEMS_MAX]}
    _dropped_problems(parsed)
    return summarize(parsed)


def parse_any(text):
    """Text or JSON, told apart by the first non-blank character."""
    return parse_json(text) if (text or '').lstrip().startswith('{') else parse_text(text)


def merge(from_json, from_text):
    """A run with -J: numbers from the JSON; what only the text has (the tool version, every
    rank's device, the transport, failure lines) from the text."""
    merged = dict(from_json)
    merged['versions'] = dict(from_text['versions'])
    for key, value in from_json['versions'].items():
        if merged['versions'].get(key) is None:
            merged['versions'][key] = value
    if len(from_text['ranks']) > len(from_json['ranks']):
        merged['ranks'] = from_text['ranks']
    merged['transport'] = from_text['transport']
    merged['failure'] = from_json['failure'] or from_text['failure']
    merged['problems'] = list(from_json.get('problems') or []) + list(from_text.get('problems') or [])
    return summarize(merged)


def _unreadable(parsed, message):
    """A failure that names the first line (or JSON field) that could not be read, and why."""
    failure = {'kind': None, 'lines': [], 'message': message, 'line': None}
    problems = parsed.get('problems') or []
    if problems:
        first = problems[0]
        failure['line'] = first
        where = 'line %s' % first['line'] if first['line'] is not None else first['text']
        failure['message'] += '; %s cannot be read (%s): %s' % (where, first['reason'], first['text'])
        failure['lines'] = [first['text']]
    return failure


def outcome(parsed, rc=None):
    """(status, failure): a known failure first, then data corruption, then a table cut off."""
    if parsed['failure']:
        return 'failed', parsed['failure']
    if parsed['wrong_total'] or (parsed['out_of_bounds'] and not parsed['out_of_bounds']['ok']):
        return 'failed', {'kind': 'data_corruption', 'lines': [],
                          'message': '#wrong total %s, out of bounds values %s: the collective returned wrong data'
                                     % (parsed['wrong_total'], (parsed['out_of_bounds'] or {}).get('count'))}
    if parsed['columns'] is not None or parsed['results'] or parsed['header']:
        if not parsed['complete']:
            failure = _unreadable(parsed, 'output ends after %d result rows without "# Avg bus bandwidth"'
                                  % len(parsed['results']))
            failure['kind'] = 'truncated'
            return 'failed', failure
    elif not parsed['complete']:
        failure = _unreadable(parsed, 'no nccl-tests header or result table in the output')
        failure['kind'] = 'unparsed'
        return 'failed', failure
    if rc:
        return 'failed', {'kind': 'exit_status', 'lines': [], 'message': 'the benchmark exited with status %s' % rc}
    return 'ok', None


# ---------------------------------------------------------------------------- command lines

# Benchmark options -> nccl-tests flags (common.cu longopts).
BENCH_FLAGS = (
    ('min_bytes', '-b'), ('max_bytes', '-e'), ('step_factor', '-f'), ('step_bytes', '-i'), ('gpus_per_process', '-g'),
    ('threads', '-t'), ('iterations', '-n'), ('warmup_iters', '-w'), ('datatype', '-d'), ('op', '-o'), ('root_rank', '-r'),
    ('check', '-c'), ('blocking', '-z'), ('cuda_graph', '-G'), ('test_timeout', '-T'),
)


def _flag_value(value):
    if isinstance(value, bool):
        return '1' if value else '0'
    return str(value)


def bench_argv(binary, options, json_path=None):
    """[binary, -b ..., -e ..., ...] with only the options given, then -J and extra_args."""
    argv = [binary]
    for key, flag in BENCH_FLAGS:
        if options.get(key) is not None:
            argv.extend([flag, _flag_value(options[key])])
    if json_path:
        argv.extend(['-J', json_path])
    argv.extend(options.get('extra_args') or [])
    return argv


def launch_argv(launcher, argv, options, env_names=()):
    """The whole command line: argv alone (local), or behind mpirun / srun."""
    if launcher == 'local':
        return list(argv)
    # A ',' would add a host, a leading '-' make an option (of mpirun, or of the ssh it starts):
    # ValueError naming the entry (_argv).
    hosts = _argv.check_hosts(options.get('hosts') or [], 'hosts')
    slots = options.get('slots_per_host')
    if launcher == 'mpirun':
        cmd = [options.get('mpirun_path') or 'mpirun']
        processes = options.get('processes') or (len(hosts) * slots if hosts and slots else None)
        if processes:
            cmd.extend(['-np', str(processes)])
        if hosts:
            cmd.extend(['--host', ','.join('%s:%d' % (host, slots) if slots else host for host in hosts)])
        if options.get('oob_cidr'):
            # Out-of-band traffic (MPI's own TCP and its daemons) on the management network
            # (Open MPI's btl_tcp_if_include / oob_tcp_if_include MCA parameters).
            cmd.extend(['--mca', 'btl_tcp_if_include', options['oob_cidr'], '--mca', 'oob_tcp_if_include', options['oob_cidr']])
        for name in env_names:
            cmd.extend(['-x', name])
        cmd.extend(options.get('launcher_args') or [])
        return cmd + list(argv)
    cmd = [options.get('srun_path') or 'srun']
    nodes = options.get('nodes') or (len(hosts) if hosts else None)
    if nodes:
        cmd.extend(['-N', str(nodes)])
    processes = options.get('processes') or (nodes * slots if nodes and slots else None)
    if processes:
        cmd.extend(['-n', str(processes)])
    if hosts:
        cmd.append('--nodelist=%s' % ','.join(hosts))
    cmd.extend(options.get('launcher_args') or [])
    return cmd + list(argv)


def library_env(env, debug, launcher=None):
    """The environment additions: the user's library variables, plus INFO logging of INIT, NET
    and ENV (the network, HCAs, GDR, the settings NCCL saw; GRAPH too for launcher local)
    when debug is on."""
    added = {}
    if debug:
        added.update(DEBUG_ENV)
        if launcher == 'local':
            added['NCCL_DEBUG_SUBSYS'] = DEBUG_SUBSYS_LOCAL
    for name, value in (env or {}).items():
        added[str(name)] = _flag_value(value)
    return added


def help_has_json(help_text):
    """Does the binary's -h list -J / --output_file (nccl-tests >= 2.17)?"""
    return re.search(r'(?:^|[\s\[])(?:-J\b|--output_file\b)', help_text or '', re.M) is not None
