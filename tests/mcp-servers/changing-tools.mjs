// An MCP server over the official TypeScript SDK (1.x) on stdio whose tools change at
// runtime: calling `grow` adds the tool `grown`, and the SDK tells the client with
// `notifications/tools/list_changed`.
//
// Usage: node changing-tools.mjs
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

const server = new McpServer(
    { name: 'changing-tools', version: '1.0.0' },
    { capabilities: { tools: { listChanged: true } } }
);
let grown = false;
server.registerTool(
    'grow',
    { description: 'Adds the tool `grown`.' },
    async () => {
        if (!grown) {
            grown = true;
            server.registerTool(
                'grown',
                { description: 'A tool added at runtime.' },
                async () => ({ content: [{ type: 'text', text: 'grown and answering' }] })
            );
        }
        return { content: [{ type: 'text', text: 'grew a tool' }] };
    }
);
await server.connect(new StdioServerTransport());
