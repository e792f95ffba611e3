# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A node against itself and against the inventory the user expects (``gpu_fabric_expected``): what a
fleet of identical nodes hides from the fleet comparison (_fleet.py sees no difference where every node
lacks the same thing).

- ``RDMA_DEVICE_UNBOUND``: a PCI function of an RDMA-capable class with no RDMA device (gdr facts
  ``rdma_unbound``, module_utils/_peermem.py), with the kernel log's reason;
- ``INVENTORY_GPU_WITHOUT_RAIL``: a node with several compute rails (module_utils/_rails.py decides which
  HCAs are rails) and more GPUs than rails, so that some GPU has no compute NIC of its own;
- ``INVENTORY_EXPECTED_MISMATCH``: fewer or more GPUs or HCAs of a role than ``gpu_fabric_expected`` says,
  or a port of the role at another rate.

``gpu_fabric_expected`` (per group or host, docs in README.md "Expected inventory")::

    gpu_fabric_expected:
      gpus: 8
      gpus_per_rail: 1            # optional: how many GPUs may share one compute rail (default: any even share)
      hcas:
        compute: {count: 8, rate_gbps: 400}
        storage: {count: 1, rate_gbps: 200}
        management: {count: 0}

Every part is optional. ``expected_errors`` is the one check of its shape: the role_variable_errors filter
refuses a bad value in validate (every ``-e`` value is a string: a JSON object given as a string is read as
JSON), and the rules below judge only a value it accepts.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr, _rails
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule

VARIABLE = 'gpu_fabric_expected'
_TOP_KEYS = ('gpus', 'gpus_per_rail', 'hcas')
_ROLE_KEYS = ('count', 'rate_gbps')
# A JSON value given as a string is read up to this size: an inventory value, not a file.
_MAX_TEXT = 65536
# The largest count or rate read (GPUs, HCAs, Gb/s): 1e6 is past any node's; a larger number is no count.
_NUMBER_MAX = 10 ** 6


def _number(value: Any, whole: bool) -> Optional[float]:
    """A count or a rate as a number, or None: ints and floats, and their text ('8', '400'); never a bool."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip()) if whole else float(value.strip())
        except ValueError:
            return None
    if isinstance(value, float) and not math.isfinite(value):
        return None          # JSON's 1e999 reads as inf: no count or rate is
    if whole and isinstance(value, float) and value.is_integer():
        value = int(value)
    if (whole and not isinstance(value, int)) or not isinstance(value, (int, float)):
        return None
    # No count or rate has more digits than this: past it an int would not even compare with a float rate.
    if abs(value) > _NUMBER_MAX:
        return None
    return value


def _from_text(value: Any) -> Tuple[Any, List[str]]:
    """A string (every -e value is one) read as JSON; anything else as it is."""
    if not isinstance(value, (str, bytes)):
        return value, []
    text = value.decode('utf-8', 'replace') if isinstance(value, bytes) else value
    if len(text) > _MAX_TEXT:
        return None, ['%s is longer than %d characters' % (VARIABLE, _MAX_TEXT)]
    try:
        return json.loads(text), []
    except ValueError as exc:
        # No ': ' in the line: the yaml result format prints it unquoted (plugins/filter/role_variables.py).
        return None, ['%s is a string that is not a JSON object (%s) - give a mapping in the inventory, or -e with '
                      'JSON, e.g. -e \'{"%s":{"gpus":8,"hcas":{"compute":{"count":8,"rate_gbps":400}}}}\''
                      % (VARIABLE, getattr(exc, 'msg', exc), VARIABLE)]


def _role_entry(role: str, want: Any, errors: List[str]) -> Dict[str, Any]:
    """{'count', 'rate_gbps'} of one role of ``hcas`` (a bare number is its count); errors appended."""
    if isinstance(want, (int, str)) and not isinstance(want, bool):
        want = {'count': want}
    if not isinstance(want, dict):
        errors.append('%s.hcas.%s is not a mapping of count and rate_gbps' % (VARIABLE, role))
        return {}
    errors.extend('%s.hcas.%s has %s, which is not one of %s' % (VARIABLE, role, repr(key)[:40], ', '.join(_ROLE_KEYS))
                  for key in want if key not in _ROLE_KEYS)
    entry = {}
    for key, whole in (('count', True), ('rate_gbps', False)):
        if want.get(key) is None:
            continue
        number = _number(want[key], whole)
        if number is None or number < 0 or (key == 'rate_gbps' and number == 0):
            what = 'a whole number' if whole else 'a rate in Gb/s above 0'
            errors.append('%s.hcas.%s.%s=%s is not %s' % (VARIABLE, role, key, repr(want[key])[:40], what))
        else:
            entry[key] = number
    return entry


def parse_expected(value: Any) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """(the expectation as {'gpus', 'gpus_per_rail', 'hcas': {role: {'count', 'rate_gbps'}}}, errors) of a
    ``gpu_fabric_expected`` value; (None, []) for null or an empty value."""
    if value is None or value == '' or value == {}:
        return None, []
    value, errors = _from_text(value)
    if errors:
        return None, errors
    if not isinstance(value, dict):
        return None, ['%s is a %s, not a mapping of gpus, gpus_per_rail and hcas' % (VARIABLE, type(value).__name__)]
    errors = ['%s has %s, which is not one of %s' % (VARIABLE, repr(key)[:40], ', '.join(_TOP_KEYS))
              for key in value if key not in _TOP_KEYS]
    spec: Dict[str, Any] = {'gpus': None, 'gpus_per_rail': None, 'hcas': {}}
    for key, least in (('gpus', 0), ('gpus_per_rail', 1)):
        if value.get(key) is not None:
            number = _number(value[key], True)
            if number is None or number < least:
                errors.append('%s.%s=%s is not a whole number of at least %d' % (VARIABLE, key, repr(value[key])[:40], least))
            else:
                spec[key] = number
    hcas = value.get('hcas')
    if hcas is not None and not isinstance(hcas, dict):
        errors.append('%s.hcas is not a mapping of roles (%s)' % (VARIABLE, ', '.join(_rails.ROLES)))
        hcas = {}
    for role, want in (hcas or {}).items():
        if role not in _rails.ROLES:
            errors.append('%s.hcas has role %s, which is not one of %s' % (VARIABLE, repr(role)[:40], ', '.join(_rails.ROLES)))
        else:
            spec['hcas'][role] = _role_entry(role, want, errors)
    return (None if errors else spec), errors


def expected_errors(value: Any) -> List[str]:
    """Why ``value`` is no ``gpu_fabric_expected`` (plugins/filter/role_variables.py), [] when it is one."""
    return parse_expected(value)[1]


def _devices_by_role(node: Dict[str, Any], role_of: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    by_role: Dict[str, List[Dict[str, Any]]] = dict((role, []) for role in _rails.ROLES)
    for device in ((node.get('ib') or {}).get('devices') or []):
        if isinstance(device, dict) and device.get('name'):
            by_role.setdefault((role_of.get(device['name']) or {}).get('role') or _rails.COMPUTE, []).append(device)
    return by_role


def _count_finding(host: str, subject: str, have: int, want: int, what: str, names: List[str], counts: str = '') -> Finding:
    fewer = have < want
    return finding(F.INVENTORY_EXPECTED_MISMATCH, host, subject, {'have': have, 'expected': want, 'devices': names},
                   '%d %s where %s says %d%s%s' % (have, what, VARIABLE, want,
                                                   ': a device did not enumerate, lost its driver, or the inventory is out of date'
                                                   if fewer else ': more than expected (the inventory may be out of date)',
                                                   # A card's role is _rails.py's: the one whose netdev carries the default
                                                   # route is management, not storage.
                                                   '; the node\'s HCAs by role: %s' % counts if counts else ''),
                   severity=None if fewer else 'warning')


def _rate_findings(host: str, role: str, devices: List[Dict[str, Any]], rate: Any) -> List[Finding]:
    """INVENTORY_EXPECTED_MISMATCH for each ACTIVE port of ``devices`` at another rate than ``rate`` (a port down is IB_PORT_DOWN's)."""
    found = []
    for device in devices:
        for port in device.get('ports') or []:
            have = port.get('rate_gbps')
            if port.get('state') != 'ACTIVE' or not isinstance(have, (int, float)) or have == rate:
                continue
            found.append(finding(
                F.INVENTORY_EXPECTED_MISMATCH, host, '%s/%s' % (device['name'], port.get('port')),
                {'rate_gbps': have, 'expected_gbps': rate, 'role': role},
                'the %s port runs at %g Gb/s where %s says %g Gb/s%s' % (
                    role, have, VARIABLE, rate, ': every test and ring through it runs at this rate' if have < rate
                    else ' (the inventory may be out of date)'),
                severity=None if have < rate else 'warning', at=[('hca', host, device['name'])]))
    return found


def expected_findings(host: str, node: Dict[str, Any], role_of: Dict[str, Any]) -> List[Finding]:
    """The node against its ``expected`` (a gpu_fabric_expected value parse_expected accepts)."""
    spec, errors = parse_expected(node.get('expected'))
    if spec is None or errors:
        return []
    found = []
    gdr = node.get('gdr')
    if spec['gpus'] is not None and isinstance(gdr, dict):
        gpus = [g.get('name') for g in gdr.get('gpus') or []]
        if len(gpus) != spec['gpus']:
            found.append(_count_finding(host, 'gpus', len(gpus), spec['gpus'], 'GPU(s)', gpus))
    if node.get('ib') is None:
        return found
    by_role = _devices_by_role(node, role_of)
    counts = ', '.join('%s %d (%s)' % (role, len(devices), ' '.join(d['name'] for d in devices))
                       for role, devices in by_role.items() if devices) or 'none'
    for role, want in sorted(spec['hcas'].items()):
        devices = by_role.get(role) or []
        if want.get('count') is not None and len(devices) != want['count']:
            found.append(_count_finding(host, 'hcas.%s' % role, len(devices), want['count'], '%s HCA(s)' % role,
                                        [d['name'] for d in devices], counts))
        if want.get('rate_gbps') is not None:
            found.extend(_rate_findings(host, role, devices, want['rate_gbps']))
    return found


def _serving(gdr: Dict[str, Any], gpus: List[str], rails: List[str]) -> Tuple[Dict[str, List[str]], List[str], bool]:
    """({rail: the GPUs it is the nearest compute NIC of}, the GPUs without a rail of their own, whether the share is even)."""
    nearest = _gdr.nearest_nics(gdr.get('topology'), set(rails))
    serving: Dict[str, List[str]] = dict((rail, []) for rail in rails)
    for gpu in gpus:
        if gpu in nearest:
            serving[nearest[gpu][1]].append(gpu)
    lacking = [gpu for names in serving.values() for gpu in names[1:]] + [gpu for gpu in gpus if gpu not in nearest]
    share = len(gpus) // len(rails)
    return serving, lacking, len(gpus) % len(rails) == 0 and all(len(names) == share for names in serving.values())


def _rail_verdict(node: Dict[str, Any], even: bool, share: int, rails: int) -> Tuple[Optional[str], str]:
    """(severity, why) of a node whose GPUs outnumber its rails: uneven, more per rail than expected, or by design."""
    spec, _errors = parse_expected(node.get('expected'))
    allowed = (spec or {}).get('gpus_per_rail')
    declared = ((spec or {}).get('hcas') or {}).get(_rails.COMPUTE, {}).get('count') == rails
    if not even:
        return None, ('the rails are shared unevenly: a rail-optimised node gives each GPU its own compute NIC, and the '
                      'GPUs sharing one get a fraction of its bandwidth in every collective')
    if allowed is not None and share > allowed:
        return 'warning', 'each compute rail serves %d GPUs, more than gpus_per_rail %d of %s' % (share, allowed, VARIABLE)
    # NVIDIA DGX-1 (System Architecture white paper WP-08437-002: 8 Tesla V100, four 100 Gb/s EDR NICs, two
    # GPUs and one NIC under each PCIe switch) shares each NIC between a pair of GPUs by design.
    return 'info', ('each compute rail serves %d GPUs, an even share by design (as DGX-1\'s pair of GPUs per NIC)%s'
                    % (share, '; %s says so' % VARIABLE if declared or allowed else ''))


def gpu_rail_findings(host: str, node: Dict[str, Any], role_of: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """INVENTORY_GPU_WITHOUT_RAIL: more GPUs than compute rails on a node with two or more rails. The rails are
    the hardware's (module_utils/_rails.py roles without NCCL_IB_HCA): a job's NCCL_IB_HCA that uses two of eight
    NICs is its own choice, not a GPU without a NIC. ``role_of``: those roles where the caller has them."""
    role_of = role_of if role_of is not None else _rails.roles(node.get('ib'), node.get('gdr'))
    gdr = node.get('gdr') or {}
    gpus = sorted((g.get('name') for g in gdr.get('gpus') or [] if g.get('name')), key=_rails.natural_key)
    rails = [d['name'] for d in _devices_by_role(node, role_of)[_rails.COMPUTE] if d.get('ports')]
    # One compute NIC for all GPUs (a workstation, a single-rail node) is no rail-optimised design: nothing to say.
    # No rail at all: GDR_NO_RDMA_NIC's and RDMA_DEVICE_UNBOUND's.
    if len(rails) < 2 or len(gpus) <= len(rails):
        return []
    serving, lacking, even = _serving(gdr, gpus, rails)
    severity, why = _rail_verdict(node, even, len(gpus) // len(rails), len(rails))
    words = ', '.join('%s shared by %s' % (rail, ', '.join(names)) for rail, names in sorted(
        serving.items(), key=lambda item: _rails.natural_key(item[0])) if len(names) > 1)
    # An even share by design is no test's cause: said on a place no path holds.
    places = [('gpu', host, gpu) for gpu in lacking] if severity != 'info' else [('inventory', host)]
    return [finding(
        F.INVENTORY_GPU_WITHOUT_RAIL, host, 'node',
        {'gpus': len(gpus), 'compute_rails': len(rails), 'serving': serving, 'without_own_rail': lacking, 'even': even},
        '%d GPUs and %d compute rails: %s without a compute NIC of its own (%s); %s' % (
            len(gpus), len(rails), ', '.join(lacking) or 'no GPU', words or 'no GPU topology', why),
        severity=severity, at=places or [('node', host)], path=[('node', host)] + [('gpu', host, gpu) for gpu in lacking])]


def unbound_findings(host: str, gdr: Optional[Dict[str, Any]]) -> List[Finding]:
    """RDMA_DEVICE_UNBOUND for each RDMA-capable function without an RDMA device (gdr facts ``rdma_unbound``)."""
    found = []
    for entry in (gdr or {}).get('rdma_unbound') or []:
        if not isinstance(entry, dict) or not entry.get('bdf'):
            continue
        strict = entry.get('strict') is not False
        log = [line for line in entry.get('log') or [] if isinstance(line, str)]
        said = ('; the kernel log says: %s' % ' | '.join(log) if log else
                '; the kernel log names it nowhere' if entry.get('log_state') == 'read' else
                '; the kernel log was %s' % (entry.get('log_state') or 'not read'))
        found.append(finding(
            F.RDMA_DEVICE_UNBOUND, host, entry['bdf'],
            {'vendor': entry.get('vendor'), 'class': entry.get('class'), 'driver': entry.get('driver'), 'log': log,
             'log_state': entry.get('log_state')},
            'PCI function %s (vendor %s, class %s) has no RDMA device: %s%s' % (
                entry['bdf'], entry.get('vendor'), entry.get('class'), entry.get('why') or 'no reason read', said),
            severity=None if strict else 'info',
            # A card that did not become an RDMA device takes the node's RDMA with it (its rail, or every rail);
            # a plain Ethernet function of a Broadcom or Intel card sits on no test's path.
            at=[('node', host)] if strict else [('pci', host, entry['bdf'])]))
    return found


@rule(produces=(F.RDMA_DEVICE_UNBOUND, F.INVENTORY_GPU_WITHOUT_RAIL, F.INVENTORY_EXPECTED_MISMATCH), reads=(F.FLEET_HW_MISSING,),
      parts=('judged', 'roles'))
def inventory(fleet: Fleet, findings: List[Finding]) -> List[Finding]:
    # A node the fleet comparison already finds short of a device (FLEET_HW_MISSING): one fault, one root - the
    # GPU it leaves without a rail is that finding's; this rule is for the fleet where every node is alike.
    short = set(f['host'] for f in findings if f['code'] == F.FLEET_HW_MISSING)
    found: List[Finding] = []
    for host in sorted(fleet.judged):
        node = fleet.judged[host]
        found += unbound_findings(host, node.get('gdr'))
        if host not in short:
            found += gpu_rail_findings(host, node)
        found += expected_findings(host, node, fleet.roles[host])
    return found
