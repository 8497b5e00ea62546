from django.apps import AppConfig


class RunnerConfig(AppConfig):
    name = "runner"
    label = "runner"
    verbose_name = "Context and invocations"

    def ready(self) -> None:
        # The runner stands above sessions and memory, so it is where one's signal reaches
        # the other: an append that completes an invocation queues its ingestion.
        from memory.outbox import admission
        from sessions_app.signals import invocation_completed

        invocation_completed.connect(admission.on_invocation_completed, dispatch_uid="outbox")
