import shlex
from decimal import Decimal

from django.core.management.base import BaseCommand, CommandError

from budgets.errors import BudgetValidationError
from budgets.prices import parse_cost_factor, parse_gpu_type_name
from scheduling.discovery import parse_options, register_cluster
from scheduling.errors import JobValidationError


def parse_prices(pairs: list[str]) -> dict[str, Decimal]:
    """``TYPE=FACTOR`` pairs, every one checked before anything is written."""
    prices: dict[str, Decimal] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            if not sep:
                raise BudgetValidationError("price", "expected TYPE=FACTOR, e.g. H100=1.0")
            name = parse_gpu_type_name(name)
            factor = parse_cost_factor(value)
        except BudgetValidationError as exc:
            raise CommandError(f"--price {pair!r}: {exc.message}") from None
        if prices.get(name, factor) != factor:
            raise CommandError(f"--price {pair!r}: {name} is priced twice, differently")
        prices[name] = factor
    return prices


class Command(BaseCommand):
    help = (
        "Register (or rediscover) a cluster: records it, prices GPU types (--price) and "
        "discovers its nodes and GPUs. Nodes of an unpriced GPU type stay drained."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--backend", required=True, choices=["slurm", "kubernetes", "simulated"]
        )
        parser.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="backend option, repeatable (e.g. partition=gpu)",
        )
        parser.add_argument(
            "--price",
            action="append",
            default=[],
            metavar="TYPE=FACTOR",
            help="cost factor of a GPU type in H100-equivalent GPU-hours, repeatable "
            "(e.g. H100=1.0 B200=2.0); audited like any price change",
        )

    def handle(self, *args, name, backend, option, price, **kwargs):
        prices = parse_prices(price)
        try:
            report = register_cluster(name, backend, parse_options(option), prices)
        except (JobValidationError, BudgetValidationError) as exc:
            raise CommandError(str(exc)) from exc
        for gpu_type, factor in prices.items():
            self.stdout.write(f"GPU type {gpu_type}: cost factor {factor}")
        for node in report.nodes:
            flag = " (drained)" if node.drained else ""
            self.stdout.write(f"{node.name}: {node.gpus} x {node.gpu_type}{flag}")
        for name_ in report.vanished:
            self.stdout.write(f"{name_}: no longer reported; drained")
        for warning in report.warnings:
            self.stderr.write(self.style.WARNING(warning))
        for gpu_type in report.unpriced:
            nodes = ", ".join(n.name for n in report.nodes if n.gpu_type == gpu_type)
            again = shlex.join(
                ["python", "manage.py", "register_cluster", name, "--backend", backend]
                + [f"--option={pair}" for pair in option]
                + [f"--price={gpu_type}=FACTOR"]
            )
            self.stderr.write(
                self.style.WARNING(
                    f"GPU type {gpu_type!r} has no cost factor: its nodes ({nodes}) stay "
                    f"drained until it is priced. Price it with\n  {again}\nor in the admin "
                    "(GPU types), then rediscover the cluster's nodes."
                )
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"cluster {report.cluster.name}: {len(report.nodes)} nodes, "
                f"{report.total_gpus} GPUs"
            )
        )
