"""ctxadmin: a self-hosted context and memory service for AI agents."""

from ctxadmin.celery import app as celery_app

__all__ = ["celery_app"]
