#!/usr/bin/env bash
# The conformance suite's auth/* client scenarios, carried out the way a space would:
# a gateway, `mew bridge --url` to the scenario's server, a scripted person who opens each
# sign-in link the bridge logs (`sign-in needed for ...: open URL`), and a scripted caller
# who calls `test-tool` through the space (again after each new sign-in, for step-up).
# The pre-registered client of `auth/pre-registration` comes from MCP_CONFORMANCE_CONTEXT
# through a client file. Usage (Node 22 and the suite installed):
#   npx conformance client --scenario auth/basic-cimd --command tests/mcp-conformance/auth-client.sh
# MEW (the `mew` binary) defaults to target/debug/mew of this checkout.
URL="${@: -1}"
MEW="${MEW:-$(cd "$(dirname "$0")/../.." && pwd)/target/debug/mew}"
D=$(mktemp -d /tmp/mew-auth.XXXX)
cd "$D"
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat > space.yaml <<Y
space: {id: auth}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  files:
    type: mcp-bridge
    tokens: [files-token]
    capabilities: [{kind: mcp/response}, {kind: mcp/request}, {kind: participant/status}]
    mcp_server: {url: "$URL"}
Y
$MEW gateway -c space.yaml -p $PORT --no-auto-start > gw.log 2>&1 &
GW=$!
sleep 0.5
EXTRA=()
CTX="${MCP_CONFORMANCE_CONTEXT:-}"; [ -z "$CTX" ] && CTX="{}"
CID=$(echo "$CTX" | python3 -c 'import json,sys;print(json.load(sys.stdin).get("client_id",""))')
if [ -n "$CID" ]; then
  echo "${MCP_CONFORMANCE_CONTEXT}" > client.json
  EXTRA+=(--oauth-client-file client.json)
fi
$MEW bridge -g ws://127.0.0.1:$PORT -s auth --id files --token files-token --url "$URL" \
  --oauth-client-metadata-url https://conformance-test.local/client-metadata.json "${EXTRA[@]}" \
  --max-reconnects 1 > bridge.log 2>&1 &
BR=$!
follow() {
  # Follow every sign-in link not followed yet.
  grep -o 'open http[^ ]*' bridge.log | sed 's/^open //' | while read -r u; do
    if ! grep -qxF "$u" followed.txt 2>/dev/null; then
      echo "$u" >> followed.txt
      curl -s -L -o /dev/null --max-time 10 "$u"
    fi
  done
}
touch followed.txt
for i in $(seq 1 100); do
  follow
  grep -q "MCP server ready" bridge.log && break
  kill -0 $BR 2>/dev/null || break
  sleep 0.1
done
call() {
  curl -s --max-time 10 -H 'Authorization: Bearer human-token' -H 'Content-Type: application/json' \
    -X POST "http://127.0.0.1:$PORT/participants/human/messages" \
    -d '{"kind":"mcp/request","to":["files"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test-tool","arguments":{}}}}' > /dev/null
}
if grep -q "MCP server ready" bridge.log; then
  for attempt in 1 2 3 4; do
    n=$(grep -c 'open http' bridge.log)
    call
    sleep 1
    follow
    sleep 0.5
    [ "$(grep -c 'open http' bridge.log)" = "$n" ] && break
  done
fi
sleep 0.5
kill $BR $GW 2>/dev/null
wait 2>/dev/null
[ -n "$MEW_KEEP_LOGS" ] && cp bridge.log gw.log "$MEW_KEEP_LOGS"/
rm -rf "$D"
exit 0
