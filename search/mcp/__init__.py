"""The MCP face (Model Context Protocol): the query services as tools an assistant or agent can call.
`search mcp` serves it over stdio; `search serve` mounts it at /mcp (streamable HTTP)."""

from search.mcp.server import McpEndpoint, build

__all__ = ["McpEndpoint", "build"]
