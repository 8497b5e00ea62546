"""The project shell: settings, URLs, the Celery app, WSGI and gunicorn configuration."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
