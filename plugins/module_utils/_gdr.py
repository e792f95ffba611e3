# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""GPUDirect RDMA readiness of one node, read from sysfs/procfs and the OFED install.

The chain this exists to find: the running kernel stopped exporting ``mm_kobj``
(upstream https://lkml.kernel.org/r/2023080436-algebra-cabana-417d@gregkh, in RHEL 9.6
through CentOS Stream 9 commit f5f98e718ccbadf22fae8f73625542a68ee79132) -> MLNX OFED's
configure did not define HAVE_MM_KOBJ_EXPORTED -> ib_core never creates
/sys/kernel/mm/memory_peers/<client>/version -> the collective library does not detect
GPUDirect RDMA and stages every transfer through host memory (4.57 GB/s instead of
24.38 GB/s busbw on two MetaX C500 nodes: tests/fixtures/seeds/000_mccl_allreduce_2node_16gpu_*.txt,
from https://wangzheng422.github.io/docker_env/redhat/notes/2025/2025.12.metax.mccl.perf.debug.html).
"""

from __future__ import annotations

import re
import zlib

from collections import OrderedDict
from typing import Any

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci, _pcie, _peermem
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import WHOLE_LIMIT

MEMORY_PEERS = '/sys/kernel/mm/memory_peers'

# How each vendor's collective library decides that peer memory works.
# NVIDIA: NCCL src/transport/net_ib/gdr.cc ibGdrSupportInitOnce() accepts any of
#   memory_peers/nv_mem/version, memory_peers/nv_mem_nc/version,
#   /sys/module/nvidia_peermem/version (so nvidia_peermem alone is enough,
#   memory_peers or not). Client names: nvidia-peermem.c DRV_NAME "nv_mem" (+ "_nc").
# AMD: RCCL src/transport/net_ib.cc ncclIbGdrSupport() reads
#   memory_peers/amdkfd/version (kfd_peerdirect.c "amdkfd"), else looks for
#   ib_register_peer_memory_client in /proc/kallsyms.
# MetaX: MCCL needs memory_peers/mxcd/version, created when metax.ko registers
#   with OFED's peer_mem (ib_register_peer_memory_client, mlnx-ofa_kernel
#   drivers/infiniband/core/peer_mem.c, under #ifdef HAVE_MM_KOBJ_EXPORTED); nothing else
#   stands in for it.
PEER_PATHS = {
    'nvidia': {
        'modules': ('nvidia_peermem', 'nv_peer_mem'),
        'clients': ('nv_mem', 'nv_mem_nc'),
        'module_version_files': ('/sys/module/nvidia_peermem/version',),
        'kallsyms_fallback': False,
        'library': 'NCCL',
    },
    'amd': {
        'modules': ('amdgpu',),
        'clients': ('amdkfd',),
        'module_version_files': (),
        'kallsyms_fallback': True,
        'library': 'RCCL',
    },
    'metax': {
        'modules': ('metax',),
        'clients': ('mxcd',),
        'module_version_files': (),
        'kallsyms_fallback': False,
        'library': 'MCCL',
    },
}

# NCCL's default NCCL_NET_GDR_LEVEL is PXB (src/graph/paths.cc ncclTopoCheckGdr):
# a GPU whose nearest NIC is further away than that gets no GPUDirect RDMA.
DEFAULT_GDR_LEVEL = 'PXB'
# The distance classes beyond it: PHB, NODE, SYS.
BEYOND_GDR_LEVEL = _pci.DISTANCE_CLASSES[_pci.DISTANCE_CLASSES.index(DEFAULT_GDR_LEVEL) + 1:]
# The vendors whose library can register GPU memory through dma-buf (ibv_reg_dmabuf_mr) instead
# of a peer-memory client: NCCL (src/transport/net_ib.cc ncclIbDmaBufSupport) and RCCL; MCCL cannot.
DMABUF_VENDORS = ('nvidia', 'amd')

# The configure of mlnx-ofa_kernel writes compat/config.h and the package installs
# it under /usr/src/ofa_kernel/<arch>/<kver>/ (default -> alternatives symlink;
# DKMS builds under /usr/src/ofa_kernel-dkms/<arch>/<kver>). compat/config/rdma.m4:
# LB_CHECK_SYMBOL_EXPORT([mm_kobj], ...) -> "#define HAVE_MM_KOBJ_EXPORTED 1".
_OFED_HEADER_BASES = ('/usr/src/ofa_kernel', '/usr/src/ofa_kernel-dkms')
_HAVE_MM_KOBJ_RE = re.compile(r'^\s*#\s*define\s+HAVE_MM_KOBJ_EXPORTED\b', re.M)
# ofed_info -s: 'MLNX_OFED_LINUX-23.07-0.5.1.2:' (fixture) and the generated
# script line 'then echo MLNX_OFED_LINUX-<ver>:; exit 0; fi'; DOCA/OFED-internal alike.
_OFED_VERSION_RE = re.compile(r'\b((?:MLNX_OFED_LINUX|OFED-internal|DOCA[\w.-]*?|OFED)-\d[\w.-]*?)(?=:|\s|\(|$)')
# ASCII and bounded: a damaged osrelease must not reach int() with a thousand digits.
_KERNEL_VERSION_RE = re.compile(r'^(\d{1,9})\.(\d{1,9})', re.A)
# What `uname -r` can print: the kernel's UTS_RELEASE (at most 64 bytes, __NEW_UTS_LEN in
# include/uapi/linux/utsname.h) is a version plus CONFIG_LOCALVERSION and the distribution's
# suffix - '5.15.0-105-generic', '5.14.0-427.13.1.el9_4.x86_64', '6.8.0+'. Never '/' or '..'.
_RELEASE_RE = re.compile(r'^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}$')
# ibv_reg_dmabuf_mr and ib_umem_dmabuf arrived in Linux 5.12.
DMABUF_MIN_KERNEL = (5, 12)


def parse_modules(text):
    """/proc/modules -> set of loaded module names."""
    return set(line.split(None, 1)[0] for line in (text or '').splitlines() if line.strip())


def parse_ofed_version(text):
    """Version from ``ofed_info -s`` output or the ofed_info script itself, or None."""
    match = _OFED_VERSION_RE.search(text or '')
    return match.group(1) if match else None


def kernel_version(release):
    match = _KERNEL_VERSION_RE.match(release or '')
    return (int(match.group(1)), int(match.group(2))) if match else None


def symvers_exports(text, symbol):
    """Module.symvers: '0xcrc<TAB>symbol<TAB>module<TAB>EXPORT_...' (text or bytes).

    The symbol is the second field, so it sits between two tabs wherever the line is: one
    find() over the whole file (1-2 MB on a distribution kernel) instead of a line split."""
    if isinstance(text, bytes):
        return (b'\t%s\t' % symbol.encode()) in text
    return ('\t%s\t' % symbol) in (text or '')


def kallsyms_has(sysroot, symbol):
    """True/False when /proc/kallsyms is readable, None otherwise.

    Lines are '<address> <type> <name>' or '<address> <type> <name>\t[<module>]'.
    Searched as bytes with find(): a stock kallsyms is ~5 MB, and a regex or a
    line split over it cost more than the rest of the module together. Read once
    per run (the kernel generates it on every read).
    """
    data = sysroot.cached('/proc/kallsyms')
    if data is None:
        return None
    name = b' ' + symbol.encode()
    return data.find(name + b'\n') >= 0 or data.find(name + b'\t') >= 0 or data.endswith(name)


def _gunzip(data, limit):
    """gzip.decompress, refusing output past ``limit`` bytes (a small .gz can expand to
    gigabytes: zlib's ratio reaches ~1000:1 on zeros). Concatenated members are read as
    gzip(1) reads them (RFC 1952 section 2.2)."""
    out, size = [], 0
    while data:
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = inflate.decompress(data, limit + 1 - size)
        size += len(chunk)
        out.append(chunk)
        if size > limit:
            raise ValueError('expands past %d MiB' % (limit >> 20))
        if not inflate.eof:
            raise EOFError('compressed file ended before the end-of-stream marker was reached')
        data = inflate.unused_data.lstrip(b'\0')
    return b''.join(out)


def read_kernel(sysroot):
    """Kernel release and whether it exports mm_kobj, with where that was seen.

    The export table of the build (Module.symvers, or RHEL's /boot/symvers-<release>.gz)
    is read first: it is what OFED's configure greps (compat/config/rdma.m4
    LB_CHECK_SYMBOL_EXPORT), and a file read is cheap. /proc/kallsyms (an exported
    symbol has its ``__ksymtab_mm_kobj`` entry there) is the fallback: the kernel generates it on
    read, ~100 ms on a stock kernel, so it is only read when no export table is there.
    """
    release = sysroot.text('/proc/sys/kernel/osrelease')
    if release and not _RELEASE_RE.match(release):
        # The release names directories below: a '../../../etc' or a '/' from a hostile
        # snapshot must not choose which file is read.
        sysroot.warn('/proc/sys/kernel/osrelease holds %r, not a kernel release: not used' % release[:80])
        release = None
    result = {'release': release, 'mm_kobj_exported': None, 'mm_kobj_source': None}
    if release:
        for rel in ('/usr/src/kernels/%s/Module.symvers', '/lib/modules/%s/build/Module.symvers'):
            rel = rel % release
            # Read whole: a distribution kernel's Module.symvers is 1-2 MB, and a symbol past
            # the first MiB (text()'s limit for sysfs attributes) read as "not exported" -
            # the wrong root cause on a healthy kernel. Unreadable: the next source decides.
            data = sysroot.cached(rel) if sysroot.exists(rel) else None
            if data is not None:
                result.update(mm_kobj_exported=symvers_exports(data, 'mm_kobj'), mm_kobj_source=rel)
                return result
        rel = '/boot/symvers-%s.gz' % release
        # Compressed, RHEL's is ~0.5 MB: more than 16 MiB is no export table.
        content = sysroot.binary(rel, size=16 << 20) if sysroot.exists(rel) else None
        if content:
            try:
                text = _gunzip(content, WHOLE_LIMIT).decode('utf-8', 'replace')
            except (IOError, OSError, EOFError, ValueError, zlib.error) as exc:
                sysroot.warn('cannot decompress %s: %s' % (rel, exc))
            else:
                result.update(mm_kobj_exported=symvers_exports(text, 'mm_kobj'), mm_kobj_source=rel)
                return result
    exported = kallsyms_has(sysroot, '__ksymtab_mm_kobj')
    if exported is not None:
        result.update(mm_kobj_exported=exported, mm_kobj_source='/proc/kallsyms')
    return result


def read_ofed(sysroot, release):
    """OFED version and whether it was built with HAVE_MM_KOBJ_EXPORTED (for this kernel)."""
    result = {'version': None, 'version_source': None, 'config_header': None, 'have_mm_kobj_exported': None}
    for rel in ('/usr/bin/ofed_info', '/sys/module/mlx5_core/version'):
        version = parse_ofed_version(sysroot.text(rel, quiet=True))
        if version is None and rel.startswith('/sys/module'):
            # MLNX OFED's mlx5_core carries MODULE_VERSION("24.10-3.2.5"); inbox has none.
            version = sysroot.text(rel, quiet=True)
        if version:
            result.update(version=version, version_source=rel)
            break
    candidates = []
    for base in _OFED_HEADER_BASES:
        for arch in sysroot.listdir(base):
            if release:
                candidates.append('%s/%s/%s/compat/config.h' % (base, arch, release))
    candidates.append('/usr/src/ofa_kernel/default/compat/config.h')
    for rel in candidates:
        content = sysroot.text(rel, quiet=True)
        if content is not None:
            result.update(config_header=rel, have_mm_kobj_exported=bool(_HAVE_MM_KOBJ_RE.search(content)))
            break
    return result


def read_peer_memory(sysroot, modules, vendors):
    """Per GPU vendor: is the peer-memory path there, as its collective library would see it?"""
    clients = {}
    for client in sysroot.listdir(MEMORY_PEERS):
        clients[client] = sysroot.text('%s/%s/version' % (MEMORY_PEERS, client), quiet=True)
    paths = {}
    for vendor in vendors:
        spec = PEER_PATHS[vendor]
        loaded = [m for m in spec['modules'] if m in modules]
        client = next((c for c in spec['clients'] if clients.get(c)), None)
        evidence = None
        if client:
            evidence = '%s/%s/version' % (MEMORY_PEERS, client)
        else:
            evidence = next((f for f in spec['module_version_files'] if sysroot.exists(f)), None)
        if evidence is None and spec['kallsyms_fallback'] and kallsyms_has(sysroot, 'ib_register_peer_memory_client'):
            evidence = '/proc/kallsyms: ib_register_peer_memory_client'
        paths[vendor] = {
            'modules': list(spec['modules']),
            'module_loaded': loaded[0] if loaded else None,
            'client': client or spec['clients'][0],
            'client_version': clients.get(client) if client else None,
            'library': spec['library'],
            'detected': evidence is not None,
            'evidence': evidence,
        }
    return {'memory_peers_present': sysroot.isdir(MEMORY_PEERS), 'clients': clients, 'paths': paths}


def read_dmabuf(sysroot, kernel, vendors, nvidia_version_text):
    """Is the dma-buf path (ibv_reg_dmabuf_mr) possible? It needs no peer-memory client."""
    reasons = []
    kver = kernel_version(kernel.get('release'))
    kernel_ok = None if kver is None else kver >= DMABUF_MIN_KERNEL
    if kernel_ok is False:
        reasons.append('kernel %s is older than 5.12 (no ib_umem_dmabuf)' % kernel['release'])
    gpu_ok = {}
    for vendor in vendors:
        if vendor == 'nvidia':
            if nvidia_version_text is None:
                gpu_ok[vendor] = None
                reasons.append('NVIDIA driver version unknown (/proc/driver/nvidia/version missing)')
            else:
                # dma-buf export needs the open kernel module (NVRM 'Open Kernel Module' banner).
                gpu_ok[vendor] = 'Open Kernel Module' in nvidia_version_text
                if not gpu_ok[vendor]:
                    reasons.append('NVIDIA proprietary kernel module: dma-buf needs the open kernel module')
        elif vendor == 'amd':
            gpu_ok[vendor] = True
        else:
            gpu_ok[vendor] = None
            reasons.append('%s: dma-buf support of the GPU driver unknown' % vendor)
    values = [kernel_ok] + list(gpu_ok.values())
    possible = False if False in values else (None if None in values or not vendors else True)
    return {'possible': possible, 'kernel_supports': kernel_ok, 'gpu_driver_supports': gpu_ok, 'reasons': reasons}


# ASCII digits only: str.isdigit() is also true for '\u00b2' ('²'), which int() refuses, and a
# device named mlx5_0\u00b2 in a snapshot once failed gdr_facts and then the report of every node.
_NATURAL_SPLIT_RE = re.compile(r'([0-9]+)')


def _digit_run_key(digits):
    """A run of ASCII digits as a key ordering like its number, of any length: (digits without
    the leading zeros, how many; those digits). Not int(): past sys.get_int_max_str_digits()
    (4,300 by default) it raises ValueError, and a 5,000-digit hca_type in a snapshot once
    stopped the report of every node."""
    stripped = digits.lstrip('0')
    return (len(stripped), stripped)


def natural_key(name: object) -> list[Any]:
    """Sort key putting mlx5_2 before mlx5_10: text and numbers alternate (text at even places,
    ASCII digit runs at odd places, as _digit_run_key: same order as their numbers), so any two
    keys compare without a TypeError, whatever the length of a run."""
    return [_digit_run_key(part) if index % 2 else part for index, part in enumerate(_NATURAL_SPLIT_RE.split(str(name or '')))]


def nic_rank(distance, bridges, nic):
    """How near a NIC is to a GPU, smaller is nearer: the distance class, then the bridges
    between them, then the NIC's name in natural order - so that a tie (two NICs under one
    switch) falls the same way in the facts, the NCCL settings and the diagnosis."""
    return (_pci.DISTANCE_CLASSES.index(distance), len(bridges or []), natural_key(nic))


def nearest_nics(topology, among=None):
    """{GPU name: (distance class, NIC name)}: each GPU's nearest NIC in ``topology`` (the
    facts' pairs), only among the NIC names ``among`` when given (e.g. NICs with an ACTIVE port)."""
    best = {}
    for pair in topology or []:
        if (among is not None and pair.get('nic') not in among) or pair.get('distance') not in _pci.DISTANCE_CLASSES:
            continue
        rank = nic_rank(pair['distance'], pair.get('bridges'), pair['nic'])
        if pair['gpu'] not in best or rank < best[pair['gpu']][0]:
            best[pair['gpu']] = (rank, pair['distance'], pair['nic'])
    return dict((gpu, (value[1], value[2])) for gpu, value in best.items())


def build_topology(pci, gpus, nics):
    """Distance of every GPU x NIC pair, the bridges between them, and each GPU's nearest NIC."""
    pairs = []
    for gpu in gpus:
        for nic in nics:
            if nic['pci_address'] not in pci:
                continue
            cls, bridges = _pci.distance(pci[gpu['pci_address']], pci[nic['pci_address']])
            pairs.append({'gpu': gpu['name'], 'nic': nic['name'], 'distance': cls, 'bridges': bridges})
    nearest = nearest_nics(pairs)
    for gpu in gpus:
        distance, nic = nearest.get(gpu['name'], (None, None))
        gpu['nearest_nic'], gpu['nearest_nic_distance'] = nic, distance
    return pairs


def read_acs(sysroot, pairs):
    """ACS state of every bridge on a GPU<->NIC path (config space, ext. capability 0x000D)."""
    on_paths = {}
    for pair in pairs:
        for bdf in pair['bridges']:
            on_paths.setdefault(bdf, []).append('%s-%s' % (pair['gpu'], pair['nic']))
    bridges = []
    for bdf in sorted(on_paths):
        config = sysroot.binary('%s/%s/config' % (_pci.PCI_DEVICES, bdf))
        acs = _pci.parse_acs(config)
        entry = {'pci_address': bdf, 'readable': acs is not None, 'present': None, 'cap': None, 'ctl': None,
                 'cap_flags': [], 'ctl_flags': [], 'redirects_p2p': None, 'paths': on_paths[bdf]}
        if acs is not None:
            entry.update(present=acs['present'], cap=acs['cap'], ctl=acs['ctl'])
            if acs['present']:
                entry.update(cap_flags=_pci.acs_flags(acs['cap']), ctl_flags=_pci.acs_flags(acs['ctl']),
                             redirects_p2p=bool(acs['ctl'] & _pci.ACS_P2P_REDIRECT_MASK))
            else:
                entry['redirects_p2p'] = False
        bridges.append(entry)
    unreadable = [b['pci_address'] for b in bridges if not b['readable']]
    if unreadable:
        sysroot.warn('ACS unknown on %d bridge(s) (%s): extended PCI config space is readable by root only'
                     % (len(unreadable), ', '.join(unreadable[:4]) + (' ...' if len(unreadable) > 4 else '')))
    redirecting = set(b['pci_address'] for b in bridges if b['redirects_p2p'])
    for pair in pairs:
        states = [b for b in bridges if b['pci_address'] in pair['bridges']]
        pair['acs_redirect_bridges'] = [b['pci_address'] for b in states if b['pci_address'] in redirecting]
        if pair['acs_redirect_bridges']:
            pair['acs_redirect'] = True
        elif any(b['redirects_p2p'] is None for b in states):
            pair['acs_redirect'] = None
        else:
            pair['acs_redirect'] = False
    return bridges


def dmabuf_stands_in(vendor, dmabuf):
    """Can the dma-buf path (facts ``dmabuf``) carry this vendor's GPU memory instead of peer memory?"""
    return bool((dmabuf or {}).get('possible')) and vendor in DMABUF_VENDORS


# What blocks a peer-memory path, deepest root first (peer_verdict's ``blocker``) -> what the
# peermem_verdict filter answers. A node says what blocks; the controller names the finding
# (plugin_utils/diagnosis/_findings.py PEER_BLOCKER_CODES), so the registry never travels to a node.
PEER_OUTCOMES = OrderedDict((
    ('mm_kobj_not_exported', 'kernel'),
    ('ofed_stale_build', 'rebuild'),
    ('peermem_not_loaded', 'module'),
    ('memory_peers_missing', 'unknown'),
))


def peer_verdict(vendor, path, kernel, ofed, dmabuf=None):
    """Why a vendor's peer-memory path is missing: the one decision that the facts' chain and
    reasons, the diagnosis (its GDR_* finding: _findings.PEER_BLOCKER_CODES) and the peermem_verdict filter all read.

    None when the path is there. Otherwise {blocker (a PEER_OUTCOMES kind), outcome, chain (the causes, deepest first,
    ending in what the library does), remedy (the registry's remedy variant, or None), blocking
    (False where dma-buf stands in)}. The order follows the causality, deepest root first:
      1. no MLNX OFED: the inbox stack has no peer-memory client API (ib_register_peer_memory_client
         is MLNX OFED's), so no module or kernel change brings the path;
      2. a library that accepts the module alone (NCCL: /sys/module/nvidia_peermem/version) and the
         module is not loaded: loading it is enough, whatever memory_peers says;
      3. the kernel does not export mm_kobj: OFED cannot define HAVE_MM_KOBJ_EXPORTED against it,
         so memory_peers never appears and loading the module would not help;
      4. the kernel exports it (or cannot be read) and OFED was built without it: rebuild OFED;
      5. the module is not loaded;
      6. everything is in place but the client did not register.
    Where a deeper root wins while the module is not loaded either, the chain says so.
    """
    if path.get('detected'):
        return None
    kernel, ofed = kernel or {}, ofed or {}
    want = '%s/%s/version' % (MEMORY_PEERS, path.get('client'))
    modules = ' or '.join(path.get('modules') or [])
    consequence = ('%s does not detect GPUDirect RDMA and stages every transfer through host memory, '
                   'a fraction of the cross-node bandwidth' % path.get('library'))
    unloaded = 'peer-memory module %s is not loaded (/proc/modules)' % modules
    also = ('' if path.get('module_loaded') else
            '; peer-memory module %s is not loaded either (/proc/modules), but loading it alone would not help' % modules)
    remedy, outcome = None, None
    module_suffices = bool(PEER_PATHS.get(vendor, {}).get('module_version_files'))
    if ofed.get('version') is None and ofed.get('config_header') is None:
        blocker = 'memory_peers_missing' if path.get('module_loaded') else 'peermem_not_loaded'
        remedy, outcome = 'no_ofed', 'not_applicable'
        chain = ['no MLNX OFED is installed: the inbox RDMA stack has no peer-memory client API%s' % also,
                 'so %s does not exist' % want, consequence]
    elif not path.get('module_loaded') and module_suffices:
        blocker = 'peermem_not_loaded'
        chain = [unloaded, 'so %s does not exist' % want, consequence]
    elif kernel.get('mm_kobj_exported') is False:
        blocker = 'mm_kobj_not_exported'
        built = ('was built without HAVE_MM_KOBJ_EXPORTED (%s)' % ofed.get('config_header')
                 if ofed.get('have_mm_kobj_exported') is False else 'cannot define HAVE_MM_KOBJ_EXPORTED')
        chain = ['kernel %s does not export mm_kobj (no __ksymtab_mm_kobj, %s)%s'
                 % (kernel.get('release'), kernel.get('mm_kobj_source'), also),
                 'so MLNX OFED %s %s' % (ofed.get('version') or '(version unknown)', built),
                 'so ib_core never creates /sys/kernel/mm/memory_peers and %s does not exist' % want, consequence]
    elif ofed.get('have_mm_kobj_exported') is False:
        blocker = 'ofed_stale_build'
        if kernel.get('mm_kobj_exported') is None:
            outcome = 'unknown'
            first = ('MLNX OFED %s was built without HAVE_MM_KOBJ_EXPORTED (%s) and whether kernel %s exports mm_kobj is '
                     'unknown (no export table, no /proc/kallsyms): if it does, OFED must be rebuilt for it'
                     % (ofed.get('version') or '(version unknown)', ofed.get('config_header'), kernel.get('release')))
        else:
            first = ('kernel %s exports mm_kobj but MLNX OFED %s was built without HAVE_MM_KOBJ_EXPORTED (%s): '
                     'it was built against another kernel and must be rebuilt for this one'
                     % (kernel.get('release'), ofed.get('version') or '(version unknown)', ofed.get('config_header')))
        chain = [first + also, 'so %s does not exist' % want, consequence]
    elif not path.get('module_loaded'):
        blocker = 'peermem_not_loaded'
        chain = [unloaded, 'so %s does not exist' % want, consequence]
    else:
        blocker = 'memory_peers_missing'
        chain = ['module %s is loaded and OFED supports memory_peers, but client %s has not registered '
                 '(see the kernel log of %s)' % (path['module_loaded'], path.get('client'), path['module_loaded']),
                 'so %s does not exist' % want, consequence]
    return {'blocker': blocker, 'outcome': outcome or PEER_OUTCOMES[blocker], 'chain': chain, 'remedy': remedy,
            'blocking': not dmabuf_stands_in(vendor, dmabuf)}


def assess(gpus, nics, pairs, peer, kernel, ofed, dmabuf):
    """gdr_ready and the reasons against it, in words."""
    reasons = []
    notes = []
    if not gpus:
        reasons.append('no GPU of a supported vendor (NVIDIA 0x10de, AMD 0x1002, MetaX 0x9999) on the PCI bus')
    if not nics:
        reasons.append('no RDMA NIC (/sys/class/infiniband is empty)')
    for vendor, path in sorted(peer['paths'].items()):
        verdict = peer_verdict(vendor, path, kernel, ofed, dmabuf)
        if verdict is None:
            continue
        path['chain'] = verdict['chain']
        text = '%s GPUs: %s' % (vendor, ' -> '.join(path['chain']))
        if not verdict['blocking']:
            notes.append(text + '; the dma-buf path is possible and %s can use it instead' % path['library'])
        else:
            reasons.append(text)
    by_gpu = {}
    for pair in pairs:
        by_gpu.setdefault(pair['gpu'], []).append(pair)
    for gpu in gpus:
        nearest = [p for p in by_gpu.get(gpu['name'], []) if p['nic'] == gpu['nearest_nic']]
        if not nearest:
            continue
        pair = nearest[0]
        if pair['distance'] in BEYOND_GDR_LEVEL:
            reasons.append('%s (%s): nearest RDMA NIC %s is %s away; NCCL_NET_GDR_LEVEL defaults to %s, so '
                           'GPUDirect RDMA is not used for it'
                           % (gpu['name'], gpu['pci_address'], pair['nic'], pair['distance'], DEFAULT_GDR_LEVEL))
        if pair.get('acs_redirect'):
            reasons.append('%s (%s) <-> %s: PCIe ACS redirects peer-to-peer traffic on bridge(s) %s, so '
                           'GPU<->NIC DMA goes up to the root complex (role pcie_acs)'
                           % (gpu['name'], gpu['pci_address'], pair['nic'], ', '.join(pair['acs_redirect_bridges'])))
    return not reasons, reasons, notes


def read_gdr(sysroot, rdma_devices):
    """All GPUDirect RDMA facts of the node under ``sysroot``.

    ``rdma_devices``: [(name, pci_address)] of the RDMA devices (from /sys/class/infiniband).
    """
    pci = _pci.read_pci(sysroot)
    gpus = []
    for bdf in sorted(pci):
        dev = pci[bdf]
        if _pci.is_gpu(dev):
            gpus.append({'name': 'GPU%d' % len(gpus), 'pci_address': bdf,
                         'vendor': _pci.GPU_VENDORS[dev['vendor_id']], 'vendor_id': '0x%04x' % dev['vendor_id'],
                         'device_id': '0x%04x' % dev['device_id'] if dev['device_id'] is not None else None,
                         'numa_node': dev['numa_node'], 'driver': dev['driver']})
    nics = []
    for name, bdf in rdma_devices:
        dev = pci.get(bdf or '', {})
        nics.append({'name': name, 'pci_address': bdf, 'numa_node': dev.get('numa_node'),
                     'vendor_id': '0x%04x' % dev['vendor_id'] if dev.get('vendor_id') is not None else None,
                     'driver': dev.get('driver')})
    pairs = build_topology(pci, gpus, nics)
    acs = read_acs(sysroot, pairs)
    modules = parse_modules(sysroot.text('/proc/modules'))
    vendors = sorted(set(g['vendor'] for g in gpus))
    kernel = read_kernel(sysroot)
    ofed = read_ofed(sysroot, kernel['release'])
    peer = read_peer_memory(sysroot, modules, vendors)
    peer['modules_loaded'] = sorted(m for m in modules if any(m in spec['modules'] for spec in PEER_PATHS.values()))
    dmabuf = read_dmabuf(sysroot, kernel, vendors, sysroot.text('/proc/driver/nvidia/version', quiet=True))
    ready, reasons, notes = assess(gpus, nics, pairs, peer, kernel, ofed, dmabuf)
    # The peer-memory module against the loaded driver, and RDMA-capable functions without an RDMA device:
    # facts the diagnosis judges (GDR_PEERMEM_DRIVER_MISMATCH, RDMA_DEVICE_UNBOUND); gdr_ready keeps its meaning.
    peer_build = _peermem.read_peer_memory_build(sysroot, modules, kernel['release'])
    rdma_unbound = _peermem.read_rdma_unbound(sysroot, pci, rdma_devices, modules)
    notes.extend('%s: %s' % (entry['module'], entry['why']) for entry in peer_build if entry['state'] == 'mismatch')
    notes.extend('%s (PCI function of an RDMA class, driver %s): %s' % (entry['bdf'], entry['driver'] or 'none', entry['why'])
                 for entry in rdma_unbound)
    # PCIe links below what both ends can do, and the IOMMU mode: they slow GPUDirect RDMA down
    # (or stop it, an IOMMU that translates), they do not make it impossible: notes, and the
    # diagnosis judges them (plugin_utils/diagnosis/_pcie_rules.py).
    pcie_links = _pcie.read_links(sysroot, pci, gpus, nics)
    iommu = _pcie.read_iommu(sysroot, gpus, nics)
    for link in pcie_links:
        if link['degraded']:
            notes.append('PCIe link %s -> %s (%s) runs at %s' % (
                link['upstream'] or 'root bus', link['downstream'], link['device'] or 'bridge', _pcie.link_words(link)))
    if iommu['translated']:
        notes.append('the IOMMU translates the DMA of %s (not passthrough)' % ', '.join(iommu['translated']))
    matrix = {}
    for pair in pairs:
        matrix.setdefault(pair['gpu'], {})[pair['nic']] = pair['distance']
    return {
        'gpus': gpus,
        'nics': nics,
        'topology': pairs,
        'matrix': matrix,
        'acs': acs,
        'pcie_links': pcie_links,
        'iommu': iommu,
        'peer_memory': peer,
        'peer_memory_build': peer_build,
        'rdma_unbound': rdma_unbound,
        'kernel': kernel,
        'ofed': ofed,
        'dmabuf': dmabuf,
        'gdr_ready': ready,
        'reasons': reasons,
        'notes': notes,
    }
