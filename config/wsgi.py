import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_wsgi_application()

from runner.mcp.wsgi import McpDispatcher  # noqa: E402 - after Django is set up

# /mcp (the MCP server) beside Django, in the same process.
application = McpDispatcher(django_application)
