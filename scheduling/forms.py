"""The job submission form and the node drain form.

The form parses input into a ``JobRequest``; the rules (membership, shape, the runtime cap)
live in ``scheduling.services`` alone, and a refusal from there is put back on the field it
names, so the page and the API refuse the same things with the same words.
"""

from __future__ import annotations

from decimal import Decimal

from django import forms

from scheduling import job_env
from scheduling.errors import JobError, JobValidationError
from scheduling.models import Cluster, Job
from scheduling.serializers import MAX_COMMAND
from scheduling.services import JobRequest

# Service field name → form field name, where the form speaks hours instead of seconds.
FIELD_FOR = {"min_runtime_s": "min_runtime_hours", "sim_duration_s": "sim_duration_hours"}


class JobSubmitForm(forms.Form):
    name = forms.CharField(max_length=200)
    project = forms.ChoiceField(
        help_text="A funded job is charged to this project and protected for its minimum runtime."
    )
    cluster = forms.ChoiceField()
    gpus = forms.IntegerField(label="GPUs", min_value=1, max_value=100_000, initial=1)
    min_runtime_hours = forms.DecimalField(
        label="Minimum runtime (hours)",
        min_value=Decimal("0.02"),
        max_digits=6,
        decimal_places=2,
        initial=1,
        help_text="Protected from preemption this long after each start (8 h at most).",
    )
    resumable = forms.BooleanField(
        required=False, initial=True, help_text="It can be preempted and resumed later."
    )
    kind = forms.ChoiceField(choices=Job.Kind.choices, initial=Job.Kind.BATCH)
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=MAX_COMMAND
    )
    env = forms.CharField(
        label="Environment",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "WANDB_PROJECT=olmo"}),
        required=False,
        strip=False,
        max_length=job_env.MAX_VARS * (job_env.MAX_NAME + job_env.MAX_VALUE_BYTES + 2),
        help_text="NAME=value, one per line: the variables the job sees. Nothing of Allot's "
        "own environment reaches a job.",
    )
    sim_duration_hours = forms.DecimalField(
        label="Simulated duration (hours)",
        required=False,
        min_value=Decimal("0.001"),
        max_digits=8,
        decimal_places=3,
        help_text="Simulated clusters only: how long the job's work takes.",
    )

    def __init__(self, *args, user, clusters, **kwargs):
        from budgets.access import user_projects

        super().__init__(*args, **kwargs)
        projects = list(user_projects(user).values_list("slug_path", "name"))
        self.fields["project"].choices = [(path, f"{path} — {name}") for path, name in projects]
        self.fields["project"].choices.append(("", "no project (unfunded, preemptible)"))
        self.fields["project"].required = False
        self.clusters = {c.name: c for c in clusters}
        self.fields["cluster"].choices = [
            (c.name, f"{c.name} ({c.gpu_type}, {c.backend})") for c in clusters
        ]

    def clean_env(self) -> dict[str, str]:
        try:
            return job_env.parse_lines(self.cleaned_data.get("env", ""))
        except JobValidationError as exc:
            raise forms.ValidationError(exc.message) from None

    def to_request(self) -> JobRequest:
        data = self.cleaned_data
        cluster = self.clusters[data["cluster"]]
        sim = data.get("sim_duration_hours")
        simulated = cluster.backend == Cluster.Backend.SIMULATED
        return JobRequest(
            name=data["name"],
            project=data["project"],
            cluster=data["cluster"],
            gpus=data["gpus"],
            min_runtime_s=int(data["min_runtime_hours"] * 3600),
            resumable=data["resumable"],
            kind=data["kind"],
            command=data["command"],
            env=data["env"],
            sim_duration_s=max(1, int(sim * 3600)) if sim is not None and simulated else None,
        )

    def add_refusal(self, error: JobError) -> None:
        """Show a service refusal on the field it names (or above the form)."""
        name = FIELD_FOR.get(error.field or "", error.field)
        self.add_error(name if name in self.fields else None, error.message)


class DrainForm(forms.Form):
    reason = forms.CharField(max_length=200, required=False)
