from django.apps import AppConfig


class CachingConfig(AppConfig):
    name = "caching"
    verbose_name = "Provider prefix caches"

    def ready(self) -> None:
        # The registry wakes its cleanup by task name (``ctxadmin.wake``): every web and
        # worker process must have the task registered.
        from caching import tasks  # noqa: F401
