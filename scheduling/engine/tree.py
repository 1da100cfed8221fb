"""Fair Tree ranking over the budget tree (after Slurm's Fair Tree algorithm).

The ranking is computed once per pass from the snapshot's windowed usage, so the order is
stable for the whole pass and two jobs can never outrank each other both ways.

Algorithm (``FairTree.build``):

1. Index every budget node by path; a path whose parent is missing gets an implicit parent
   (share 1, no usage) so a partial tree still ranks.
2. Roll usage up: a node's subtree usage is its own usage plus its children's subtree usage.
3. At each level, normalise among siblings: ``S = share / sum(sibling shares)`` and
   ``U = usage / sum(sibling usage)`` (U = 0 when no sibling used anything).
4. Level fair share ``LFS = S / U`` (infinity when U = 0 and S > 0; 0 when S = 0).
5. Sort siblings by LFS, highest first. Ties are broken, in order, by the larger normalised
   share, then by path (alphabetical), so the order is total and reproducible.
6. Walk the tree depth first in that order; the position at which a node is reached is its
   rank (0 = best). A whole better-ranked subtree therefore comes before any node of a worse
   one. Jobs charged directly to an inner node rank with that node, just before its children.
7. Within a project, users rank by their own windowed usage (equal shares: least used first),
   then jobs by submit time, then by id. The user-chosen priority label is not an input.

``strictly_below(a, b)`` is the preemption test: walk both paths to the first level where
they differ and compare those two siblings' LFS values. Only a strictly smaller LFS counts;
an equal standing that step 5 broke by name does not license a preemption. We also require
the victim's side to be over its share (LFS < 1) and the preemptor's side at or under it
(LFS >= 1): without that hysteresis, two over-served siblings whose order flips with every
hour of usage take turns preempting each other (on the Philly replay it cut preemptions by a
third with no loss of utilisation or share accuracy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scheduling.engine.model import BudgetNode, Standing

INF = math.inf
UNRANKED = 1 << 30  # rank of jobs with no project (or an unknown one): after every project


@dataclass(slots=True)
class TreeNode:
    path: str
    share: float
    own_usage: float
    remaining: float
    children: list[TreeNode]
    parent: str | None
    usage: float = 0.0  # subtree usage
    norm_share: float = 0.0
    norm_usage: float = 0.0
    lfs: float = 0.0
    rank: int = UNRANKED

    def __init__(
        self,
        path: str,
        share: float,
        own_usage: float,
        remaining: float,
        children: list[TreeNode],
        parent: str | None,
    ) -> None:
        # Written out (``dataclass`` keeps a class's own ``__init__``): the generated one is
        # interpreted even in the compiled engine (``sim/compiled``), and every pass builds
        # a TreeNode per budget node.
        self.path = path
        self.share = share
        self.own_usage = own_usage
        self.remaining = remaining
        self.children = children
        self.parent = parent
        self.usage = 0.0
        self.norm_share = 0.0
        self.norm_usage = 0.0
        self.lfs = 0.0
        self.rank = UNRANKED


@lru_cache(maxsize=64)
def _layout(given: tuple[str, ...]):
    """The shape of a tree of the budget paths ``given`` (in the snapshot's order): every
    path in the order ``FairTree.build`` files it (``given``, then the implicit parents),
    the implicit parents, (path, parent) in path order (children are linked in that order)
    and the paths deepest first (usage rolls up in that order). Cached: a caller passing
    many snapshots of one budget tree (the simulator) builds it once."""
    known = dict.fromkeys(given)
    implicit = []
    for path in sorted(given, key=lambda p: p.count("/"), reverse=True):
        if "/" in path:
            for anc in ancestors(path.rsplit("/", 1)[0]):
                if anc not in known:
                    known[anc] = None
                    implicit.append(anc)
    links = tuple((p, p.rsplit("/", 1)[0] if "/" in p else None) for p in sorted(known))
    rollup = tuple(sorted(known, key=lambda p: p.count("/"), reverse=True))
    return tuple(known), tuple(implicit), links, rollup


_SHARED: dict[tuple, tuple[dict, dict]] = {}


def _shared_memo(sides: tuple) -> tuple[dict, dict]:
    """The memo of ``strictly_below`` (and of ``pass_memo._alike``'s rank vectors) for trees
    of these nodes with these sides of 1.

    ``strictly_below`` compares the two siblings where the paths part: ``lv < lp and
    lv < 1 <= lp``, which is ``lv < 1 <= lp`` alone (the first follows). So its answer
    depends only on the node set and on which nodes have LFS < 1 and which LFS >= 1, and
    those move far less often than the usage: a simulator's consecutive passes mostly have
    the same. Sharing the memo between such trees changes no answer; it only spares
    recomputing it every pass."""
    hit = _SHARED.get(sides)
    if hit is None:
        if len(_SHARED) >= 256:
            _SHARED.clear()
        hit = _SHARED[sides] = ({}, {})
    return hit


@lru_cache(maxsize=4096)
def ancestors(path: str) -> tuple[str, ...]:
    """("nlp", "nlp/olmo") for "nlp/olmo": the funding chain from the top (cached: a pass
    asks about the same few hundred paths many times)."""
    parts = path.split("/")
    return tuple("/".join(parts[: i + 1]) for i in range(len(parts)))


class FairTree:
    def __init__(self, nodes: dict[str, TreeNode], top: list[TreeNode]):
        self.nodes = nodes
        self.top = top
        self._below_cache: dict[tuple[str, str], bool] = {}
        # answers that depend only on which nodes are over and under their share, shared
        # by every tree of the same nodes and sides (``_shared_memo``): see ``pass_memo._alike``
        self.alike: dict[tuple, tuple[bool, ...]] = {}
        self._standing_cache: dict[str, tuple[Standing, ...]] = {}

    @classmethod
    def build(cls, budgets: tuple[BudgetNode, ...] | list[BudgetNode]) -> FairTree:
        nodes: dict[str, TreeNode] = {}
        for b in budgets:  # step 1
            if not b.path:
                continue
            nodes[b.path] = TreeNode(
                b.path, max(b.share, 0.0), max(b.usage_gpu_s, 0.0), b.remaining_gpu_s, [], None
            )
        paths, implicit, links, rollup = _layout(tuple(nodes))
        for anc in implicit:  # parents missing from the budgets
            nodes[anc] = TreeNode(anc, 1.0, 0.0, 0.0, [], None)
        top: list[TreeNode] = []
        for path, parent in links:
            node = nodes[path]
            if parent is not None:
                node.parent = parent
                nodes[parent].children.append(node)
            else:
                top.append(node)
        for path in rollup:  # step 2
            node = nodes[path]
            node.usage = node.own_usage + sum(c.usage for c in node.children)
        tree = cls(nodes, top)
        counter = [0]
        tree._rank_level(top, counter)
        lfs = [n.lfs for n in nodes.values()]
        tree._below_cache, tree.alike = _shared_memo(
            (paths, tuple([x < 1.0 for x in lfs]), tuple([1.0 <= x for x in lfs]))
        )
        return tree

    def _rank_level(self, siblings: list[TreeNode], counter: list[int]) -> None:
        total_share = sum(n.share for n in siblings)
        total_usage = sum(n.usage for n in siblings)
        for n in siblings:  # steps 3 and 4
            n.norm_share = n.share / total_share if total_share > 0 else 1.0 / len(siblings)
            n.norm_usage = n.usage / total_usage if total_usage > 0 else 0.0
            if n.norm_share <= 0:
                n.lfs = 0.0
            elif n.norm_usage <= 0:
                n.lfs = INF
            else:
                n.lfs = n.norm_share / n.norm_usage
        siblings.sort(key=lambda n: (-n.lfs, -n.norm_share, n.path))  # step 5
        for n in siblings:  # step 6
            n.rank = counter[0]
            counter[0] += 1
            if n.children:
                self._rank_level(n.children, counter)

    # ---- queries -----------------------------------------------------------------------

    def rank(self, project: str) -> int:
        node = self.nodes.get(project) if project else None
        return node.rank if node is not None else UNRANKED

    def leaves(self) -> list[TreeNode]:
        return sorted((n for n in self.nodes.values() if not n.children), key=lambda n: n.rank)

    def strictly_below(self, victim: str, preemptor: str) -> bool:
        """True when ``victim``'s project ranks strictly below ``preemptor``'s at the first
        level where their paths differ (unknown or empty projects are below every project)."""
        key = (victim, preemptor)
        hit = self._below_cache.get(key)
        if hit is not None:
            return hit
        result = self._strictly_below(victim, preemptor)
        self._below_cache[key] = result
        return result

    def _strictly_below(self, victim: str, preemptor: str) -> bool:
        if preemptor not in self.nodes:
            return False
        if victim not in self.nodes:
            return True
        va, pa = ancestors(victim), ancestors(preemptor)
        for v, p in zip(va, pa, strict=False):
            if v != p:
                lv, lp = self.nodes[v].lfs, self.nodes[p].lfs
                return lv < lp and lv < 1.0 <= lp
        return False  # one is an ancestor of the other: same subtree, no level to compare

    def standing(self, project: str) -> tuple[Standing, ...]:
        cached = self._standing_cache.get(project)
        if cached is not None:
            return cached
        out = []
        if project in self.nodes:
            for anc in ancestors(project):
                n = self.nodes[anc]
                out.append(Standing(anc, n.norm_share, n.norm_usage, n.lfs))
        result = tuple(out)
        self._standing_cache[project] = result
        return result

    def budget_share(self, project: str) -> float:
        """Product of the normalised sibling shares along the path (nlp/olmo: 2/3 x 6/10)."""
        if project not in self.nodes:
            return 0.0
        share = 1.0
        for anc in ancestors(project):
            share *= self.nodes[anc].norm_share
        return share
