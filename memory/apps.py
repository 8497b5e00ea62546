from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Long-term memory"

    def ready(self) -> None:
        # The outbox registers its erasure hook on import: every web and worker process
        # must have it, so that an erasure cancels the scope's queued jobs.
        from memory import (
            checks,  # noqa: F401 - registers the system check
            outbox,
        )
        from sessions_app.signals import invocation_completed

        invocation_completed.connect(outbox.on_invocation_completed, dispatch_uid="outbox")
