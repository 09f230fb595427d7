#!/usr/bin/env bash
# The whole test suite, with its own set-up, on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Real MCP servers from npm for the bridge's end-to-end tests (installed into the project).
if [ -f tests/mcp-servers/package.json ]; then
  (cd tests/mcp-servers && npm ci --no-audit --no-fund --loglevel=error)
fi

# Doc tests first, so the run closes on nextest's summary of the whole suite.
cargo test --workspace --doc --quiet
cargo nextest run --workspace --no-fail-fast --failure-output final
