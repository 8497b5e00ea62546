from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Long-term memory"

    def ready(self) -> None:
        # The outbox registers its erasure hook on import: every web and worker process
        # must have it, so that an erasure cancels the scope's queued jobs. (The runner
        # connects the outbox to the sessions' invocation_completed signal.)
        from memory import checks, outbox  # noqa: F401 - registrations on import
