// An MCP host made with the TypeScript SDK's client (`@modelcontextprotocol/client`): calls
// one tool at a Streamable HTTP endpoint.
//
//     node ts-host.mjs URL TOOL '{"arg": "value"}'
//
// Prints the tool's result as JSON (exit 0), or {"error": "...", "code": N} (exit 1).
// For https, NODE_EXTRA_CA_CERTS names the CA that signed the space's certificate.

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, tool, args] = process.argv.slice(2);
const client = new Client({ name: 'mew-ts-host', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(url));
let code = 0;
try {
    await client.connect(transport);
    const result = await client.callTool({ name: tool, arguments: JSON.parse(args ?? '{}') });
    console.log(JSON.stringify(result));
} catch (e) {
    if (!(e instanceof ProtocolError)) throw e;
    console.log(JSON.stringify({ error: e.message, code: e.code }));
    code = 1;
} finally {
    await client.close();
}
process.exit(code);
