"""Exceptions as approval workflows: requests that bend a rule (longer protection, a budget
top-up, a reservation), each with a justification, an accountable approver, an automatic
effect and an expiry. See docs/exceptions.md."""
