//! MCP (Model Context Protocol) client side, sans-IO: what a bridge speaks to an MCP server over stdio.
