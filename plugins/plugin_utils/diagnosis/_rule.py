# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""How a rule of the diagnosis declares itself: the codes it produces, the codes it reads (the
findings of other rules it is handed) and the parts of the fleet it reads. The engine
(_engine.py) orders the rules from these declarations and runs each with the fleet and the
findings of the codes it reads; no rule calls another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding

Node = Dict[str, Any]


@dataclass
class Fleet:
    """What the rules are given: ``nodes`` every host asked (facts or None); ``judged`` the hosts
    with facts, which the node rules judge; ``roles`` {host: module_utils/_rails.py node_roles()}
    of the judged hosts (one decision per node, for every rule); the benchmark's and the
    collective's results; the run's marks (unreachable hosts, completed stages, rescued failures);
    ``baseline``: an earlier report.json given as gpu_fabric_baseline (a mapping; {'error': why} where
    it could not be read), or None."""

    nodes: Dict[str, Node]
    judged: Dict[str, Node]
    roles: Dict[str, Dict[str, Any]]
    bench: Optional[Dict[str, Any]] = None
    collective: Optional[Dict[str, Any]] = None
    unreachable: Any = None
    stages: Optional[Dict[str, Any]] = None
    failures: Optional[Dict[str, Any]] = None
    baseline: Optional[Dict[str, Any]] = None


# The parts of the fleet a rule may declare it reads (the fields of Fleet).
PARTS = ('nodes', 'judged', 'roles', 'bench', 'collective', 'unreachable', 'stages', 'failures', 'baseline')

RuleFunc = Callable[[Fleet, List[Finding]], List[Finding]]


@dataclass(frozen=True)
class Rule:
    """A rule: ``run(fleet, findings)`` -> its findings, ``findings`` those so far of the codes in ``reads``.
    ``late``: the rule runs after the causes are linked (and the unexplained pair symptoms said on their
    device), on findings whose ``explained_by`` is set: it judges what no root explains."""

    name: str
    run: RuleFunc
    produces: Tuple[str, ...]
    reads: Tuple[str, ...] = ()
    parts: Tuple[str, ...] = field(default=())
    late: bool = False


RULES: List[Rule] = []


def rule(produces: Tuple[str, ...], reads: Tuple[str, ...] = (), parts: Tuple[str, ...] = (),
         late: bool = False) -> Callable[[RuleFunc], RuleFunc]:
    """Declare a rule of the engine (registered in import order; the engine orders them by what they read;
    ``late``: after the causes are linked, Rule)."""
    unknown = [code for code in tuple(produces) + tuple(reads) if code not in F.REGISTRY] + [p for p in parts if p not in PARTS]
    if unknown or not produces:
        raise ValueError('bad rule declaration: %s' % (', '.join(unknown) or 'it produces no code'))

    def register(func: RuleFunc) -> RuleFunc:
        RULES.append(Rule('%s.%s' % (func.__module__.rsplit('.', 1)[-1], func.__name__), func, tuple(produces), tuple(reads), tuple(parts),
                          bool(late)))
        return func
    return register
