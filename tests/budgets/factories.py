"""factory_boy factories for budget object graphs. Tree nodes are created through the
services, as the application does, so slug paths and audit rows are real."""

import datetime as dt
import functools

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.utils import timezone

from budgets import services
from budgets.models import BudgetNode, GpuType, Role, UsageEntry


@functools.cache
def _demo_hash() -> str:
    """Every persona's password is "demo"; hash it once, hashing is slow on purpose."""
    return make_password("demo")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"person{n}")
    password = factory.LazyFunction(lambda: _demo_hash())


class GpuTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuType
        django_get_or_create = ("name",)

    name = "H100"
    cost_factor = "1.000"


class BudgetNodeFactory(factory.Factory):
    """`BudgetNodeFactory(parent=program, name="olmo", grant=100)`; without a parent, the
    root (created once)."""

    class Meta:
        model = BudgetNode

    name = factory.Sequence(lambda n: f"node {n}")
    parent = None
    grant = None

    @classmethod
    def _create(cls, model_class, name, parent=None, grant=None, **kwargs):
        if parent is None:
            parent = BudgetNode.objects.get_root_nodes().first() or services.create_root(
                None, "Org"
            )
        node = services.create_node(None, parent, name, **kwargs)
        if grant is not None:
            services.set_grant(None, node, grant)
        return node


class RoleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Role

    user = factory.SubFactory(UserFactory)
    role = Role.Kind.RESEARCHER
    node = None


class UsageEntryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = UsageEntry

    node = None
    job_ref = factory.Sequence(lambda n: n + 1)
    gpu_type = factory.SubFactory(GpuTypeFactory)
    interval_start = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(hours=1))
    interval_end = factory.LazyAttribute(lambda o: o.interval_start + dt.timedelta(hours=1))
    gpu_seconds = 3600
    cost_gpu_seconds = factory.LazyAttribute(lambda o: o.gpu_seconds)
