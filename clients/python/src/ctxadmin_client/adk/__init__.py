"""Google ADK on ctxadmin: drop-in session, memory and artifact services, and a plugin that
builds each model request through ctxadmin's context builder.

    from ctxadmin_client.adk import CtxAdminSessionService
    session_service = CtxAdminSessionService("http://127.0.0.1:8000", "ck_...")

Needs the ``adk`` extra (``pip install 'ctxadmin-client[adk]'``).
"""

from ctxadmin_client.adk.artifacts import CtxAdminArtifactService
from ctxadmin_client.adk.memory import CtxAdminMemoryService
from ctxadmin_client.adk.plugin import CtxAdminContextPlugin
from ctxadmin_client.adk.sessions import CtxAdminSessionService

__all__ = [
    "CtxAdminArtifactService",
    "CtxAdminContextPlugin",
    "CtxAdminMemoryService",
    "CtxAdminSessionService",
]
