from django.apps import AppConfig


class ThreadsConfig(AppConfig):
    # Graph threads (LangGraph's checkpoints and pending writes) belong to an app, beside its
    # sessions; their own label keeps their tables and migration history apart.
    name = "sessions_app.threads"
    label = "threads"
    verbose_name = "Graph threads"
