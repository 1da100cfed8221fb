"""What scheduling tells the apps above it, without importing them: they connect receivers
(``exceptions.apps`` turns ``job_idle`` into an in-app notification)."""

from django.dispatch import Signal

# A running job has used too little of its GPUs for a while; its owner should hear of it.
# Sent with job=, message= (the sentence its timeline shows) and at=.
job_idle = Signal()
