"""ctxadmin's memory and context as Model Context Protocol tools, at ``/mcp``.

``wsgi`` authenticates each request (before any MCP message is read) and hands it to the
SDK's streamable HTTP transport in stateless JSON mode; ``tools`` declares the tools and maps
each onto the services the REST API uses; ``server`` lists and calls them for one caller.
"""
