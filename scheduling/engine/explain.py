"""What a pass tells about running jobs: an explanation for each (funding chain, rate,
protection, standing, and what could preempt it), and when each drained node will be empty.
Pending reasons and estimated starts are in ``report.py``.
"""

from __future__ import annotations

from scheduling.engine.model import Explanation
from scheduling.engine.state import PassState
from scheduling.engine.tree import ancestors

_new = object.__new__  # see report.fast_new


def _preemptible_by(st: PassState, job, drained: str | None, cache: dict) -> str:
    if drained:
        return f"Node {drained} is draining: it will be preempted as soon as its protection ends."
    if not job.funded:
        return "Any funded job that needs these GPUs: it runs unfunded and can yield at any time."
    protected = st.now < job.protected_until_s
    key = (job.project, protected)
    hit = cache.get(key)
    if hit is not None:
        return hit
    above: list = []
    tree = st.tree
    for anc in ancestors(job.project):
        node = tree.nodes.get(anc)
        if node is None:
            break
        parent = tree.nodes.get(node.parent) if node.parent else None
        siblings = parent.children if parent else tree.top  # by LFS, highest first
        lfs = node.lfs
        for s in siblings:  # those above form a prefix
            if not s.lfs > lfs or len(above) == 3:  # the sentence names three
                break
            above.append(s.path)
    who = (
        "a waiting funded job whose project ranks above "
        f"{job.project} at the first level where their paths differ"
    )
    now = f" (currently: {', '.join(above[:3])})" if above else " (currently: none)"
    text = (
        f"Nothing until its protection ends; after that, {who}{now}."
        if protected
        else f"{who[0].upper()}{who[1:]}{now}."
    )
    cache[key] = text
    return text


def explanations(st: PassState) -> dict[str, Explanation]:
    out = {}
    cache: dict = {}
    per_project: dict = {}  # (project, funded, protected) -> chain, standing, sentence
    drained_nodes = {
        name
        for pool in st.pools.values()
        for name, d in zip(pool.names, pool.drained, strict=True)
        if d
    }
    node_cost = {name: st.cost(pool.gpu_type) for pool in st.pools.values() for name in pool.names}
    now, new, setattr_, running = st.now, _new, object.__setattr__, st.running
    plain = Explanation.__dictoffset__ != 0
    for jid in sorted(running):
        job = running[jid]
        cost = node_cost.get(job.nodes[0][0], 1.0) if job.nodes else 1.0
        drained = None
        if drained_nodes:
            drained = next((n for n, _ in job.nodes if n in drained_nodes), None)
        pkey = (job.project, job.funded, now < job.protected_until_s)
        facts = per_project.get(pkey)
        if facts is None:
            known = job.project in st.tree.nodes
            facts = per_project[pkey] = (
                ancestors(job.project) if job.funded and known else (),
                st.tree.standing(job.project) if known else (),
                _preemptible_by(st, job, None, cache),
            )
        fields = {
            "job_id": jid,
            "funded": job.funded,
            "funding_chain": facts[0],
            "gpu_hours_per_hour": job.gpus * cost,
            "protected_until_s": job.protected_until_s,
            "protection_source": job.protection_source if job.funded else "none (unfunded)",
            "standing": facts[1],
            "preemptible_by": _preemptible_by(st, job, drained, cache) if drained else facts[2],
        }
        if not plain:  # compiled: a native class (see report.PLAIN)
            out[jid] = Explanation(**fields)
            continue
        info = new(Explanation)  # see fast_new
        setattr_(info, "__dict__", fields)
        out[jid] = info
    return out


def drain_times(st: PassState) -> dict[str, float]:
    out = {}
    for pool in st.pools.values():
        for i, drained in enumerate(pool.drained):
            if drained:
                ends = [st.running[j].protected_until_s for j in pool.jobs[i]]
                out[pool.names[i]] = max([st.now, *ends])
    return out
