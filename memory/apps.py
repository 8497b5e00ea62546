from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Long-term memory"

    def ready(self) -> None:
        # The outbox's erasure hook registers on import: every web and worker process must
        # have it, so that an erasure cancels the scope's queued jobs. The tasks register on
        # import too: services wake them by name (``ctxadmin.wake``), so every process that
        # publishes must know them. Imported here, once the models are loaded.
        from memory import tasks  # noqa: F401
        from memory.outbox import admission, erasure_hook  # noqa: F401
        from sessions_app.selectors import invocation_completed

        invocation_completed.connect(admission.on_invocation_completed, dispatch_uid="outbox")
