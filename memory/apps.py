from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Long-term memory"

    def ready(self) -> None:
        # The outbox's erasure hook registers on import: every web and worker process must
        # have it, so that an erasure cancels the scope's queued jobs. The tasks register on
        # import too: services wake them by name (``ctxadmin.wake``), so every process that
        # publishes must know them. Imported here, once the models are loaded. (The runner
        # connects the outbox to the sessions' invocation_completed signal.)
        from memory import checks, tasks  # noqa: F401 - registrations on import
        from memory.outbox import erasure_hook  # noqa: F401
