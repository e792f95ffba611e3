# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Two links of the GPUDirect RDMA chain that sysfs shows and the rest of gdr_facts does not judge:

- the peer-memory module against the GPU driver that is loaded (``peer_memory_build``): a driver
  updated without a reboot or a DKMS rebuild leaves a peer-memory module built for the other
  version, loaded or waiting on disk for the next modprobe;
- PCI functions of an RDMA-capable class with no RDMA device (``rdma_unbound``): a driver whose probe
  failed, or that is not bound at all, with the kernel log's reason where it is readable.

Files only (sysfs, procfs, modules.dep and the module's own ELF ``.modinfo`` section): no modinfo,
no modprobe, nothing run. The kernel log is read only where a function has no RDMA device.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
import zlib
from typing import Any, Callable, Iterable

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gpu_state import read_kmsg
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

try:
    import lzma
except ImportError:         # a Python built without liblzma: .ko.xz modules are said not read
    lzma = None  # type: ignore[assignment]

# Which comparison each separate peer-memory module allows (PEER_PATHS in _gdr.py names them):
# - nvidia_peermem ships in the driver's own tree (open-gpu-kernel-modules kernel-open/nvidia-peermem,
#   built by the driver's installer or DKMS package with the driver) and carries the driver's version
#   string (NV_VERSION_STRING, as nvidia.ko: /sys/module/nvidia/version): its version must equal the
#   loaded driver's.
# - nv_peer_mem (Mellanox/nv_peer_memory, nv_peer_mem.c MODULE_VERSION(DRV_VERSION), "1.3-0") carries
#   its own version: it says nothing about the driver it was built against, so no version comparison
#   is valid and its state is unknown (rebuild it with its DKMS package after every driver update).
# AMD (amdgpu) and MetaX (metax) register their peer-memory client from the GPU driver itself: no
# separate module can be built for another driver, so there is nothing to compare.
DRIVER_VERSIONED = ('nvidia_peermem',)
OWN_VERSION = ('nv_peer_mem',)
PEER_MODULES = DRIVER_VERSIONED + OWN_VERSION
DRIVER_MODULE = 'nvidia'
# /proc/driver/nvidia/version: 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...'
# (tests/fixtures/real/h200x2/state/proc_driver_version.txt) or '... x86_64 Kernel Module  570.124.06  ...'.
_NVRM_RE = re.compile(r'Kernel Module\b[^\n]*?\s(\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)\s', re.A)
# What a version from a hostile tree may be before it is shown or compared.
_VERSION_RE = re.compile(r'^[\w.+~:-]{1,64}$', re.A)

# Bounds of the ELF read: a module's section header table (nvidia.ko has ~60 sections) and its .modinfo
# (a few hundred bytes to a few kB); a compressed module is only decompressed when it is small.
_MAX_SECTIONS = 4096
_MAX_MODINFO = 1 << 20
_MAX_COMPRESSED = 8 << 20
_MAX_DECOMPRESSED = 32 << 20
# What may follow a module's file name in modules.dep before the colon: nothing, or its compression.
_SUFFIXES = (b'', b'.xz', b'.gz', b'.zst')


# What reading and decompressing a module file may raise.
_READ_ERRORS = (OSError, ValueError, EOFError, zlib.error, struct.error) + ((lzma.LZMAError,) if lzma else ())


def _version(text: str | None) -> str | None:
    text = (text or '').strip()
    return text if _VERSION_RE.match(text) else None


def nvrm_version(text: str | None) -> str | None:
    """The driver version of /proc/driver/nvidia/version, or None."""
    match = _NVRM_RE.search(text or '')
    return match.group(1) if match else None


def parse_modinfo(data: bytes | None) -> dict[str, str]:
    """{key: value} of an ELF .modinfo section (NUL-separated 'key=value'); the first value of a key wins,
    except that repeated keys (alias, depends) are joined - only version, vermagic, srcversion, name are read."""
    info = {}
    for item in (data or b'').split(b'\0'):
        key, sep, value = item.partition(b'=')
        if sep and key in (b'version', b'vermagic', b'srcversion', b'name') and key.decode('ascii', 'replace') not in info:
            info[key.decode('ascii')] = value.decode('utf-8', 'replace')[:200]
    return info


def elf_section(data_or_reader: bytes | Callable[[int, int], bytes], name: bytes = b'.modinfo') -> bytes:
    """Bytes of section ``name`` of an ELF image; ``data_or_reader``: the bytes, or pread(offset, size).
    ValueError for anything that is not a well-formed ELF within the bounds."""
    read = data_or_reader if callable(data_or_reader) else (lambda offset, size: data_or_reader[offset:offset + size])
    ident = read(0, 64)
    if len(ident) < 52 or ident[:4] != b'\x7fELF' or ident[4:5] not in (b'\x01', b'\x02') or ident[5:6] not in (b'\x01', b'\x02'):
        raise ValueError('not an ELF file')
    wide = ident[4:5] == b'\x02'
    end = '<' if ident[5:6] == b'\x01' else '>'
    if wide:
        if len(ident) < 64:
            raise ValueError('ELF header cut short')
        shoff, = struct.unpack(end + 'Q', ident[0x28:0x30])
        shentsize, shnum, shstrndx = struct.unpack(end + 'HHH', ident[0x3a:0x40])
        want = 64
    else:
        shoff, = struct.unpack(end + 'I', ident[0x20:0x24])
        shentsize, shnum, shstrndx = struct.unpack(end + 'HHH', ident[0x2e:0x34])
        want = 40
    if shentsize != want or not 0 < shnum <= _MAX_SECTIONS or shstrndx >= shnum:
        raise ValueError('ELF section table out of bounds')
    table = read(shoff, shnum * shentsize)
    if len(table) != shnum * shentsize:
        raise ValueError('ELF section table past the end of the file')

    def header(index: int) -> tuple[int, int, int]:
        raw = table[index * shentsize:(index + 1) * shentsize]
        if wide:
            sh_name, _type, _flags, _addr, offset, size = struct.unpack(end + 'IIQQQQ', raw[:40])
        else:
            sh_name, _type, _flags, _addr, offset, size = struct.unpack(end + 'IIIIII', raw[:24])
        return sh_name, offset, size
    _n, str_offset, str_size = header(shstrndx)
    if str_size > _MAX_MODINFO:
        raise ValueError('ELF section names too long')
    names = read(str_offset, str_size)
    for index in range(shnum):
        sh_name, offset, size = header(index)
        if names[sh_name:sh_name + len(name) + 1] == name + b'\0':
            if size > _MAX_MODINFO:
                raise ValueError('%s section too long' % name.decode())
            data = read(offset, size)
            if len(data) != size:
                raise ValueError('%s section past the end of the file' % name.decode())
            return data
    raise ValueError('no %s section' % name.decode())


def _open_regular(sysroot: SysRoot, rel: str) -> tuple[int, int]:
    """A file descriptor of the regular file ``rel`` below the root (never a FIFO or device; no symlink
    followed outside the root), and its size. OSError otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0) | (0 if sysroot.live else os.O_NOFOLLOW)
    # Asked of path() too: the snapshot recorder (module_utils/_capture.py RecordingSysRoot) packs a file a reader
    # opens itself when its path was asked there, so that a snapshot gives the facts the live node gave.
    sysroot.path(rel)
    fd = os.open(sysroot.host_path(rel), flags)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, 'not a regular file', rel)
    return fd, info.st_size


def _decompress(rel: str, data: bytes) -> bytes:
    if rel.endswith('.xz'):
        if lzma is None:
            raise ValueError('compressed (xz: this Python has no lzma module)')
        out = lzma.LZMADecompressor().decompress(data, _MAX_DECOMPRESSED + 1)
    else:
        out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, _MAX_DECOMPRESSED + 1)
    if len(out) > _MAX_DECOMPRESSED:
        raise ValueError('expands past %d MiB' % (_MAX_DECOMPRESSED >> 20))
    return out


def module_file_info(sysroot: SysRoot, rel: str) -> dict[str, Any]:
    """{'file', 'state', 'version', 'vermagic', 'srcversion'} of a module file: its .modinfo read from the
    ELF (section headers and that section only: pread, whatever the file's size). State 'read', or why not:
    'not read: compressed (zstd)' (no zstd in Python's standard library), a .xz/.gz module larger than
    8 MiB, or what was wrong with the file."""
    result = {'file': rel, 'state': None, 'version': None, 'vermagic': None, 'srcversion': None}
    if rel.endswith('.zst'):
        result['state'] = 'not read: compressed (zstd: no decompressor in the Python standard library)'
        return result
    try:
        fd, size = _open_regular(sysroot, rel)
    except OSError as exc:
        result['state'] = 'not read: %s' % (exc.strerror or exc)
        return result
    try:
        if rel.endswith(('.xz', '.gz')):
            if size > _MAX_COMPRESSED:
                result['state'] = 'not read: compressed and larger than %d MiB' % (_MAX_COMPRESSED >> 20)
                return result
            image = _decompress(rel, os.pread(fd, size + 1, 0))
            section = elf_section(image)
        else:
            section = elf_section(lambda offset, length: os.pread(fd, length, offset) if 0 <= offset <= size else b'')
    except _READ_ERRORS as exc:
        result['state'] = 'not read: %s' % (getattr(exc, 'strerror', None) or exc)
        return result
    finally:
        os.close(fd)
    info = parse_modinfo(section)
    result.update(state='read', version=_version(info.get('version')), vermagic=(info.get('vermagic') or None),
                  srcversion=_version(info.get('srcversion')))
    return result


def module_files(sysroot: SysRoot, release: str | None, names: Iterable[str]) -> tuple[dict[str, str], str | None]:
    """{module name: node path of its file} for ``names`` from /lib/modules/<release>/modules.dep (the file
    modprobe loads: depmod writes the one it chose, updates/ and DKMS before the distribution's), and the
    reason when modules.dep was not read (None when it was)."""
    if not release:
        return {}, 'the kernel release is unknown'
    base = '/lib/modules/%s' % release
    data = sysroot.cached(base + '/modules.dep')
    if data is None:
        return {}, '%s/modules.dep not readable' % base
    found = {}
    # bytes.find() for each file name rather than a pattern over every line: a distribution's modules.dep is
    # 0.5-1 MB, and a regex over it cost 6-15 ms of the facts' 150 ms (tests/bench/facts_speed.py).
    for name in names:
        for stem in sorted(set((name, name.replace('_', '-')))):
            needle = stem.encode() + b'.ko'
            pos = data.find(needle)
            while pos >= 0 and name not in found:
                start = data.rfind(b'\n', 0, pos) + 1
                colon = data.find(b':', start)
                after = pos + len(needle)
                # The module's own line ('path/name.ko[.xz]: deps'), not a dependency after another's colon.
                if (pos == start or data[pos - 1:pos] == b'/') and colon >= after and data[after:colon] in _SUFFIXES:
                    path = data[start:colon].decode('utf-8', 'replace')
                    if '..' not in path.split('/'):
                        found[name] = path if path.startswith('/') else '%s/%s' % (base, path)
                pos = data.find(needle, pos + 1)
    return found, None


def read_peer_memory_build(sysroot: SysRoot, modules: Iterable[str], release: str | None) -> list[dict[str, Any]]:
    """gpu_fabric_gdr ``peer_memory_build``: per separate peer-memory module loaded or installed for the
    running kernel, {module, loaded, loaded_version, loaded_srcversion, file, file_state, file_version,
    file_vermagic, driver_version, driver_source, state: match|mismatch|unknown, why}."""
    source: str | None = '/sys/module/nvidia/version'
    driver = _version(sysroot.text('/sys/module/%s/version' % DRIVER_MODULE, quiet=True))
    if driver is None:
        driver, source = nvrm_version(sysroot.text('/proc/driver/nvidia/version', quiet=True)), '/proc/driver/nvidia/version'
    if driver is None:
        source = None
    loaded = [name for name in PEER_MODULES if name in modules]
    if not loaded and DRIVER_MODULE not in modules and driver is None:
        return []       # no NVIDIA driver and no peer-memory module: nothing to compare
    # The peer-memory modules' files only: they are small (~100 kB) and a snapshot packs what is read; the driver's
    # own nvidia.ko (tens of MB) is not read.
    files, not_read = module_files(sysroot, release, PEER_MODULES)
    entries = []
    for name in PEER_MODULES:
        if name not in loaded and name not in files:
            continue
        info = module_file_info(sysroot, files[name]) if name in files else None
        entry = {'module': name, 'loaded': name in loaded,
                 'loaded_version': _version(sysroot.text('/sys/module/%s/version' % name, quiet=True)) if name in loaded else None,
                 'loaded_srcversion': _version(sysroot.text('/sys/module/%s/srcversion' % name, quiet=True)) if name in loaded else None,
                 'file': info['file'] if info else None, 'file_state': info['state'] if info else not_read or 'not in modules.dep',
                 'file_version': info['version'] if info else None, 'file_vermagic': info['vermagic'] if info else None,
                 'driver_version': driver, 'driver_source': source}
        entry['state'], entry['why'] = _judge(entry)
        entries.append(entry)
    return entries


def _judge(entry: dict[str, Any]) -> tuple[str, str]:
    """(state, why) of one peer_memory_build entry."""
    name, driver = entry['module'], entry['driver_version']
    if name in OWN_VERSION:
        return 'unknown', ('%s carries its own version (%s), not the NVIDIA driver\'s: whether it was built against the loaded '
                           'driver %s cannot be read; rebuild it (its DKMS package) after every driver update'
                           % (name, entry['loaded_version'] or entry['file_version'] or 'unknown', driver or '(unknown)'))
    if driver is None:
        return 'unknown', 'the loaded NVIDIA driver\'s version was not read (/sys/module/nvidia/version, /proc/driver/nvidia/version)'
    if entry['loaded']:
        if entry['loaded_version'] is None:
            return 'unknown', 'the loaded %s has no readable version (/sys/module/%s/version)' % (name, name)
        if entry['loaded_version'] != driver:
            return 'mismatch', ('the loaded %s is version %s, the loaded NVIDIA driver %s (%s): it was built for another driver'
                                % (name, entry['loaded_version'], driver, entry['driver_source']))
        return 'match', 'the loaded %s and the loaded driver are both %s' % (name, driver)
    if entry['file_version'] is None:
        return 'unknown', '%s is not loaded and its file was %s' % (name, entry['file_state'] or 'not found')
    if entry['file_version'] != driver:
        return 'mismatch', ('%s is not loaded and %s, what modprobe would load, is version %s while the loaded NVIDIA driver is %s '
                            '(a driver updated without a reboot, or a module left from another build): it cannot load against '
                            'this driver' % (name, entry['file'], entry['file_version'], driver))
    return 'match', '%s is not loaded; %s is built for the loaded driver %s' % (name, entry['file'], driver)


# ---------------------------------------------------------------------------- RDMA-capable functions without an RDMA device

# PCI class 0x0207xx: InfiniBand controller (PCI Code and ID Assignment Specification, base class 02 subclass 07);
# any vendor's is an RDMA device.
IB_CLASS = 0x0207
ETHERNET_CLASS = 0x0200
# Ethernet functions of RDMA vendors, and the driver that makes their RDMA device. Mellanox/NVIDIA (0x15b3):
# every ConnectX from ConnectX-4 on is RoCE capable, mlx5_ib (mlx4_ib for ConnectX-3) makes its device.
# Broadcom (0x14e4) and Intel (0x8086) sell many Ethernet functions without RDMA (tg3, igb, ixgbe): only those
# bound to a driver with an RDMA sibling count - bnxt_en (bnxt_re), ice and i40e (irdma) - and as info only,
# since such cards are often run as plain Ethernet by design.
RDMA_ETHERNET = {0x15b3: None, 0x14e4: ('bnxt_en',), 0x8086: ('ice', 'i40e')}
RDMA_SIBLING = {'mlx5_core': 'mlx5_ib', 'mlx4_core': 'mlx4_ib', 'bnxt_en': 'bnxt_re', 'ice': 'irdma', 'i40e': 'irdma'}
# A function handed to a VM (vfio-pci, pci-stub) has no RDMA device on the host by design.
PASSED_THROUGH = ('vfio-pci', 'pci-stub', 'pci_stub', 'vfio_pci')
# The kernel log lines kept per function (the last ones naming it), and what is read of the log.
LOG_LINES = 4
LOG_BYTES = 4 << 20
_LINE_LIMIT = 240


def rdma_candidates(pci: dict[str, dict[str, Any]], rdma_devices: Iterable[tuple[str, str | None]] | None) -> list[tuple[str, dict[str, Any], bool]]:
    """[(bdf, device, strict)] of the PCI functions of an RDMA-capable class or vendor without an RDMA device:
    ``strict`` False where the card is often run as plain Ethernet (Broadcom, Intel)."""
    with_device = set(bdf for _name, bdf in rdma_devices or [] if bdf)
    found = []
    for bdf in sorted(pci):
        dev = pci[bdf]
        pci_class, vendor, driver = dev.get('class'), dev.get('vendor_id'), dev.get('driver')
        if pci_class is None or bdf in with_device or driver in PASSED_THROUGH:
            continue
        sub = pci_class >> 8
        if sub == IB_CLASS:
            found.append((bdf, dev, True))
        elif sub == ETHERNET_CLASS and vendor in RDMA_ETHERNET:
            drivers = RDMA_ETHERNET[vendor]
            if drivers is None:
                found.append((bdf, dev, True))
            elif driver in drivers:
                found.append((bdf, dev, False))
    return found


def parse_kmsg(text: str | None) -> list[str]:
    """The messages of /dev/kmsg records ('prio,seq,usec,flags;message', continuation lines ' KEY=value'
    dropped) or of dmesg lines ('[   5.66] message'), in order."""
    messages = []
    for line in (text or '').splitlines():
        if not line or line[0] == ' ':
            continue
        head, sep, message = line.partition(';')
        if sep and re.match(r'^\d+,\d+,\d+', head):
            messages.append(message)
        else:
            messages.append(re.sub(r'^\[\s*\d+\.\d+\]\s*', '', line))
    return messages


def read_kernel_log(sysroot: SysRoot) -> tuple[str | None, str | None]:
    """(text, None) of the kernel log, or (None, why not). Live: /dev/kmsg read as gpu_state_facts reads it
    (module_utils/_gpu_state.py read_kmsg: non-blocking, one record per read(2)), its oldest LOG_BYTES bytes;
    it needs CAP_SYSLOG where kernel.dmesg_restrict is 1. Below another root: a regular file /dev/kmsg of
    the snapshot (records, or dmesg's lines), bounded the same."""
    if not sysroot.live:
        data = sysroot.binary('/dev/kmsg', size=LOG_BYTES) if sysroot.exists('/dev/kmsg') else None
        return (data.decode('utf-8', 'replace'), None) if data is not None else (None, '/dev/kmsg is not in the snapshot')
    try:
        return read_kmsg(limit=LOG_BYTES, most=LOG_BYTES, newest=False), None
    except OSError as exc:
        return None, '/dev/kmsg not readable: %s' % (exc.strerror or exc)


def _printable_line(text: str) -> str:
    return ''.join(c if c.isprintable() else '?' for c in text)[:_LINE_LIMIT]


def read_rdma_unbound(sysroot: SysRoot, pci: dict[str, dict[str, Any]], rdma_devices: Iterable[tuple[str, str | None]] | None,
                      modules: Iterable[str]) -> list[dict[str, Any]]:
    """gpu_fabric_gdr ``rdma_unbound``: [{bdf, vendor, class, driver, strict, why, log, log_state}] of the RDMA-capable
    PCI functions without an RDMA device (/sys/class/infiniband). The kernel log is read only when there is one."""
    candidates = rdma_candidates(pci, rdma_devices)
    if not candidates:
        return []
    text, log_state = read_kernel_log(sysroot)
    messages = parse_kmsg(text) if text is not None else []
    result = []
    for bdf, dev, strict in candidates:
        driver = dev.get('driver')
        sibling = RDMA_SIBLING.get(driver or '')
        if driver is None:
            why = 'no driver is bound to the function (its probe failed, or no driver claims it)'
        elif sibling and sibling not in modules:
            why = '%s is bound but %s, which makes its RDMA device, is not loaded' % (driver, sibling)
        else:
            why = '%s is bound%s, but the function has no RDMA device in /sys/class/infiniband' % (
                driver, ' and %s is loaded' % sibling if sibling else '')
        lines = [_printable_line(m) for m in messages if bdf in m][-LOG_LINES:]
        result.append({'bdf': bdf, 'vendor': '0x%04x' % dev['vendor_id'] if dev.get('vendor_id') is not None else None,
                       'class': '0x%06x' % dev['class'], 'driver': driver, 'strict': strict, 'why': why,
                       'log': lines, 'log_state': 'read' if text is not None else 'not read: %s' % log_state})
    return result
