"""A small MCP tool server written with `fastmcp`, for tests/unit/test_mcp_task.py: one tool,
`lookup(city)`, the code of a city in a fixed table (an unknown city is the tool's error).

    python tests/data/mcp_lookup_server.py PORT      # serves http://127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import sys

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError

CODES = {"Paris": "K7", "Lima": "Q2", "Oslo": "Z9", "Quito": "M4"}

server = FastMCP("lookup")


@server.tool
def lookup(city: str) -> str:
    """The code of a city."""
    if city not in CODES:
        raise ToolError(f"no city named {city!r}")
    return CODES[city]


if __name__ == "__main__":
    server.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]), show_banner=False, log_level="warning")
