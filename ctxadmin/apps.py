from django.apps import AppConfig


class CtxadminConfig(AppConfig):
    name = "ctxadmin"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from ctxadmin import checks  # noqa: F401 - registers the system checks
        from ctxadmin.api import schema  # noqa: F401 - registers the OpenAPI extension
