"""Personas used across the suite: a small organisation and the people in it.

budget_tree (grants for the current period, in GPU-hours):

    Org 10,000
    ├── nlp 6,000          manager: program manager      other programs hidden from them
    │   ├── olmo 3,000     researcher: member
    │   └── tulu 2,000
    └── vision 3,000       other_manager: program manager
        └── segmentation 1,000

leader has leadership on the root; cluster_admin has a cluster-wide role; outsider has none.
"""

from types import SimpleNamespace

import pytest

from budgets import services
from budgets.models import Role
from tests.budgets.factories import RoleFactory, UserFactory


@pytest.fixture
def budget_tree(db):
    root = services.create_root(None, "Allot Research", "org")
    services.set_grant(None, root, 10_000)
    nlp = services.create_node(None, root, "Language models", "nlp")
    services.set_grant(None, nlp, 6_000)
    olmo = services.create_node(None, nlp, "OLMo", "olmo")
    services.set_grant(None, olmo, 3_000)
    tulu = services.create_node(None, nlp, "Tülu", "tulu")
    services.set_grant(None, tulu, 2_000)
    vision = services.create_node(None, root, "Vision", "vision")
    services.set_grant(None, vision, 3_000)
    segmentation = services.create_node(None, vision, "Segmentation", "segmentation")
    services.set_grant(None, segmentation, 1_000)
    return SimpleNamespace(
        root=root, nlp=nlp, olmo=olmo, tulu=tulu, vision=vision, segmentation=segmentation
    )


# Who holds which role, on which node of budget_tree (None: no role, or a cluster-wide one).
PEOPLE = {
    "leader": (Role.Kind.LEADERSHIP, "root"),
    "manager": (Role.Kind.PROGRAM_MANAGER, "nlp"),
    "other_manager": (Role.Kind.PROGRAM_MANAGER, "vision"),
    "project_lead": (Role.Kind.PROJECT_LEAD, "olmo"),
    "researcher": (Role.Kind.RESEARCHER, "olmo"),
    "outsider": (None, None),
    "cluster_admin": (Role.Kind.CLUSTER_ADMIN, None),
}


def _persona(username):
    """The fixture for one of PEOPLE: a user with that role on that node."""
    role, where = PEOPLE[username]

    @pytest.fixture(name=username)
    def persona(budget_tree):
        user = UserFactory(username=username, first_name=username.replace("_", " ").title())
        if role:
            RoleFactory(user=user, role=role, node=getattr(budget_tree, where) if where else None)
        return user

    return persona


leader = _persona("leader")
manager = _persona("manager")
other_manager = _persona("other_manager")
project_lead = _persona("project_lead")
researcher = _persona("researcher")
outsider = _persona("outsider")
cluster_admin = _persona("cluster_admin")


@pytest.fixture
def personas(request):
    """Every one of PEOPLE by username, created in that order."""
    return {username: request.getfixturevalue(username) for username in PEOPLE}
