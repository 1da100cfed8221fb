from django.core.management.base import BaseCommand, CommandError

from scheduling.discovery import parse_options, register_cluster
from scheduling.errors import JobValidationError


class Command(BaseCommand):
    help = "Register (or rediscover) a cluster: records it and discovers its nodes and GPUs."

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

    def handle(self, *args, name, backend, option, **kwargs):
        try:
            report = register_cluster(name, backend, parse_options(option))
        except JobValidationError as exc:
            raise CommandError(str(exc)) from exc
        for node in report.nodes:
            flag = " (drained)" if node.drained else ""
            self.stdout.write(f"{node.name}: {node.gpus} x {node.gpu_type}{flag}")
        for name_ in report.vanished:
            self.stdout.write(f"{name_}: no longer reported; drained")
        for gpu_type in report.unpriced:
            self.stderr.write(
                self.style.WARNING(
                    f"GPU type {gpu_type!r} has no cost factor: its nodes stay drained until "
                    "you price it (admin → GPU types) and register the cluster again."
                )
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"cluster {report.cluster.name}: {len(report.nodes)} nodes, "
                f"{report.total_gpus} GPUs"
            )
        )
