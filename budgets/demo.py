"""The demo organisation: three programs, ten projects, thirty researchers, three GPU types.

`seed()` is idempotent: it creates what is missing and leaves what exists, so running
`manage.py seed_demo` twice leaves one organisation. Grants are sized for clusters of 1,024
H100, 256 B200 and 88 B300 GPUs over the current budget period, in H100-equivalent hours
(and over the previous one too when the demo's recorded history reaches back into it). The
history itself, finished jobs and the usage they were charged, is written by
``scheduling.demo_history``: the ledger is the jobs'.
"""

import datetime as dt
import functools
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.utils import timezone

from budgets import services
from budgets.balances import balances
from budgets.models import BudgetNode, GpuType, Role
from budgets.periods import BudgetPeriod

PASSWORD = "demo"
GPU_TYPES = {"H100": Decimal("1.0"), "B200": Decimal("1.8"), "B300": Decimal("2.4")}
CLUSTER_GPUS = {"H100": 1024, "B200": 256, "B300": 88}
# How far back the demo's recorded jobs reach at least: the what-if preview's four weeks, and
# one more that fills the fair-share window before them. Further when the period began earlier.
HISTORY_DAYS = 35
# program slug, name, share of the organisation; projects: slug, name, share of the program.
PROGRAMS = [
    ("nlp", "Language models", "0.45", [
        ("olmo", "OLMo pretraining", "0.35"),
        ("tulu", "Tülu post-training", "0.20"),
        ("safety", "Safety evaluations", "0.15"),
        ("multilingual", "Multilingual", "0.20"),
    ]),
    ("vision", "Vision", "0.30", [
        ("segmentation", "Segmentation", "0.30"),
        ("video-gen", "Video generation", "0.35"),
        ("clip-scaling", "CLIP scaling", "0.25"),
    ]),
    ("robotics", "Robotics", "0.20", [
        ("manipulation", "Manipulation", "0.35"),
        ("locomotion", "Locomotion", "0.30"),
        ("sim2real", "Sim-to-real", "0.25"),
    ]),
]  # fmt: skip
FIRST = ["Ada", "Ben", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivo", "Jun"]
LAST = ["Okafor", "Lindqvist", "Moreau"]


@functools.cache
def _password_hash() -> str:
    # Hashing is deliberately slow; hash once and share it among the demo people.
    return make_password(PASSWORD)


def _user(username, first="", last="", **flags):
    user, _ = get_user_model().objects.get_or_create(
        username=username,
        defaults={"first_name": first, "last_name": last, "password": _password_hash(), **flags},
    )
    return user


def _role(user, role, node=None):
    Role.objects.get_or_create(user=user, role=role, node=node)


def _node(actor, parent, slug, name):
    return services.create_node(actor, parent, name, slug, reason="demo seed")


def _grant_period(actor, nodes, period) -> bool:
    """Grant the seeded shares for ``period`` top-down, but only in a period where nobody has
    granted anything yet: once people have set a grant, the tree's numbers are theirs."""
    everything = list(BudgetNode.objects.all())
    if any(b.grant_gpu_hours for b in balances(everything, period).values()):
        return False
    total = capacity_gpu_hours(period)
    services.set_grant(
        actor, nodes[""], total.quantize(Decimal("1")), reason="demo seed", period=period
    )
    for slug, _name, share, children in PROGRAMS:
        program = nodes.get(slug)
        if program is None or program.archived:
            continue  # renamed, moved or archived by someone: not the seed's to fund
        program_grant = (total * Decimal(share)).quantize(Decimal("1"))
        services.set_grant(actor, program, program_grant, reason="demo seed", period=period)
        for child_slug, _child_name, child_share in children:
            project = nodes.get(f"{slug}/{child_slug}")
            if project is None or project.archived:
                continue
            amount = (program_grant * Decimal(child_share)).quantize(Decimal("1"))
            services.set_grant(actor, project, amount, reason="demo seed", period=period)
    return True


def history_start(now: dt.datetime) -> dt.datetime:
    """Where the recorded history begins: the current period's start, or ``HISTORY_DAYS``
    before ``now`` if the period began more recently, at local midnight."""
    earliest = timezone.localdate(now) - dt.timedelta(days=HISTORY_DAYS)
    return min(BudgetPeriod.current(now).start_at, _midnight(earliest))


def _midnight(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def history_periods(now: dt.datetime) -> list[BudgetPeriod]:
    """The periods the history touches, the current one first."""
    periods = [BudgetPeriod.current(now)]
    while periods[-1].start_at > history_start(now):
        periods.append(BudgetPeriod.containing(periods[-1].start - dt.timedelta(days=1)))
    return periods


def capacity_gpu_hours(period: BudgetPeriod) -> Decimal:
    """H100-equivalent GPU-hours the clusters deliver in a period."""
    gpus = sum(GPU_TYPES[name] * count for name, count in CLUSTER_GPUS.items())
    return gpus * period.hours


def _build_tree(leader, root, people) -> None:
    """Programs, projects and their people, the first time only (the root has no children)."""
    index = 0
    for slug, name, _share, children in PROGRAMS:
        program = _node(leader, root, slug, name)
        for child_slug, child_name, _child_share in children:
            project = _node(leader, program, child_slug, child_name)
            members = people[index * 3 : index * 3 + 3]
            index += 1
            _role(members[0], Role.Kind.PROJECT_LEAD, project)
            for person in members:
                _role(person, Role.Kind.RESEARCHER, project)
    _role(_user("manager"), Role.Kind.PROGRAM_MANAGER, BudgetNode.objects.get(slug_path="nlp"))
    for path in ("nlp/olmo", "nlp/tulu"):
        _role(_user("researcher"), Role.Kind.RESEARCHER, BudgetNode.objects.get(slug_path=path))


def seed() -> str:
    """Create what is missing; never change what exists.

    1. GPU types, the four demo users and thirty researchers are ensured (created if missing).
    2. The root is created if there is none; programs and projects only under a root without
       children. After that the structure belongs to the people using the demo: a renamed,
       moved or archived node is left as they left it, never re-created beside it.
    3. Grants are set only in a budget period where nobody has granted anything (a fresh
       database, or a new quarter), for the seeded paths that still exist. One grant changed
       by hand and the seed leaves the period alone, so it can never exceed a parent. The
       current period first: a grant stands until changed, so an earlier period's grant
       would count as the current one's if written first.
    """
    now = timezone.now()
    period = BudgetPeriod.current(now)
    for name, factor in GPU_TYPES.items():
        GpuType.objects.get_or_create(name=name, defaults={"cost_factor": factor})
    leader = _user("leader", "Lena", "Leader")
    _user("manager", "Manu", "Manager")
    _user("researcher", "Rae", "Researcher")
    admin = _user("admin", "Ari", "Admin", is_staff=True, is_superuser=True)
    people = [
        _user(f"{f.lower()}.{ln.lower()}", f, ln) for ln in LAST for f in FIRST
    ]  # 30 researchers
    root = BudgetNode.objects.filter(depth=1).first()
    if root is None:
        root = services.create_root(leader, "Allot Research", "org")
        _role(leader, Role.Kind.LEADERSHIP, root)
        _role(admin, Role.Kind.CLUSTER_ADMIN)
    if not BudgetNode.objects.get_children(root).exists():
        _build_tree(leader, root, people)
    paths = [s for s, *_ in PROGRAMS] + [p for p, _ in _seeded_projects(people)]
    nodes = {n.slug_path: n for n in BudgetNode.objects.filter(slug_path__in=paths)}
    nodes[""] = root
    granted = [_grant_period(leader, nodes, p) for p in history_periods(now)][0]
    projects = [
        project
        for project_path, _members in _seeded_projects(people)
        if (project := nodes.get(project_path)) is not None and not project.archived
    ]
    total = capacity_gpu_hours(period)
    return (
        f"Budgets: {len(PROGRAMS)} programs, {len(projects)} projects, {len(people)} researchers, "
        + (f"{total:,.0f} H100-equivalent GPU-hours for {period.label}" if granted else
           f"grants for {period.label} as people left them")
    )  # fmt: skip


def _seeded_projects(people):
    index = 0
    for slug, _name, _share, children in PROGRAMS:
        for child_slug, *_ in children:
            yield f"{slug}/{child_slug}", people[index * 3 : index * 3 + 3]
            index += 1
