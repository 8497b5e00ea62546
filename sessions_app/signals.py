"""Signals other apps listen to (sessions never import them)."""

from django.dispatch import Signal

#: Sent after an append stored events completing an invocation (``turn_complete``, or a
#: final text answer of the model), with ``app``, ``user_id`` and ``session_id``; within
#: the caller's transaction when there is one. Receivers must not raise: the append has
#: happened.
invocation_completed = Signal()
