"""The OpenAI Agents SDK on ctxadmin: ``CtxAdminSession``, the SDK's ``Session`` (and its
compaction-aware variant) storing a conversation's items in a ctxadmin session.

    from ctxadmin_client.openai_agents import CtxAdminSession
    session = CtxAdminSession("s1", app="demo", user_id="alice",
                              base_url="http://127.0.0.1:8000", api_key="ctx_...")
    result = await Runner.run(agent, "Hi", session=session)

Needs the ``openai-agents`` extra (``pip install 'ctxadmin-client[openai-agents]'``).
"""

from ctxadmin_client.openai_agents.session import CtxAdminSession

__all__ = ["CtxAdminSession"]
