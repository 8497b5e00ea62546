from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    # A part of sessions (an artifact belongs to a session or to a user of an app) with its
    # own label, which keeps its tables and its migration history.
    name = "sessions_app.artifacts"
    label = "artifacts"
    verbose_name = "Artifacts"

    def ready(self) -> None:
        from ctxadmin.erasure import register_user_eraser
        from sessions_app.artifacts import services

        register_user_eraser(services.erase_user_artifacts)
