"""Page forms: they parse and render; the services decide what is valid and name the field."""

from django import forms

JUSTIFICATION = forms.CharField(
    widget=forms.Textarea(attrs={"rows": 4}),
    max_length=4000,
    help_text="Why the rule should bend: the deadline, the run, what happens otherwise.",
)


class ProtectionForm(forms.Form):
    hours = forms.DecimalField(
        min_value=0.01,
        max_digits=7,
        decimal_places=2,
        help_text="Protected hours from each start of the job.",
    )
    justification = JUSTIFICATION


class TopupForm(forms.Form):
    gpu_hours = forms.DecimalField(
        min_value=0.01,
        max_digits=14,
        decimal_places=2,
        label="GPU-hours",
        help_text="Extra GPU-hours for the current period.",
    )
    justification = JUSTIFICATION


class ReservationForm(forms.Form):
    gpus = forms.IntegerField(min_value=1, max_value=1_000_000, label="GPUs")
    start = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    end = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    node = forms.ChoiceField(required=False, label="Project")
    justification = JUSTIFICATION

    def __init__(self, *args, projects=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["node"].choices = [("", "—")] + [(p.pk, p.label) for p in projects]


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = forms.CharField(required=False, max_length=4000)
