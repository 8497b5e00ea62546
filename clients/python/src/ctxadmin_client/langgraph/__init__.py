"""LangGraph on ctxadmin: a checkpoint saver on ctxadmin's graph threads and a long-term
store on ctxadmin's memory.

    from ctxadmin_client.langgraph import CtxAdminSaver, CtxAdminStore
    saver = CtxAdminSaver("http://127.0.0.1:8000", "ctx_...", app="demo")
    store = CtxAdminStore("http://127.0.0.1:8000", "ctx_...", app="demo")
    graph = builder.compile(checkpointer=saver, store=store)

Needs the ``langgraph`` extra (``pip install 'ctxadmin-client[langgraph]'``).
"""

from ctxadmin_client.langgraph.checkpoint import CtxAdminSaver
from ctxadmin_client.langgraph.store import CtxAdminStore

__all__ = ["CtxAdminSaver", "CtxAdminStore"]
