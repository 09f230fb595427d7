// An MCP server over the official TypeScript SDK (`@modelcontextprotocol/server` 2.x) that
// speaks only the 2026-07-28 revision: the SDK's strict mode (`legacy: 'reject'`) refuses
// `initialize` and every other 2025-era request with the unsupported-protocol-version error.
//
// Usage: PORT=NNNN node modern-only.mjs [LOG_FILE]
// Serves Streamable HTTP on http://127.0.0.1:PORT/mcp. Each request's method, and each
// refusal, is appended to LOG_FILE as one JSON line, so tests can see what a client sent.
import http from 'node:http';
import fs from 'node:fs';
import {
    McpServer,
    createMcpHandler,
    fromJsonSchema,
    inputRequired,
    inputResponse
} from '@modelcontextprotocol/server';

const port = Number(process.env.PORT || 3000);
const logFile = process.argv[2];
const log = (entry) => {
    if (logFile) fs.appendFileSync(logFile, JSON.stringify(entry) + '\n');
};

const colourSchema = {
    type: 'object',
    properties: { colour: { type: 'string', title: 'Colour', enum: ['red', 'green', 'blue'] } },
    required: ['colour']
};

function factory() {
    const server = new McpServer({ name: 'modern-only', version: '1.0.0' });
    server.registerTool(
        'echo',
        {
            description: 'Echoes the text back.',
            inputSchema: fromJsonSchema({
                type: 'object',
                properties: { text: { type: 'string' } },
                required: ['text']
            })
        },
        async ({ text }) => ({ content: [{ type: 'text', text: `echo: ${text}` }] })
    );
    server.registerTool(
        'paint',
        {
            description: 'Asks which colour to paint with, then paints.',
            inputSchema: fromJsonSchema({ type: 'object', properties: {} })
        },
        async (_args, ctx) => {
            const answer = inputResponse(ctx.mcpReq.inputResponses, 'colour');
            if (answer.kind === 'missing') {
                return inputRequired({
                    inputRequests: {
                        colour: inputRequired.elicit({
                            message: 'Which colour?',
                            requestedSchema: colourSchema
                        })
                    }
                });
            }
            if (answer.kind !== 'elicit') {
                return { isError: true, content: [{ type: 'text', text: 'unexpected answer' }] };
            }
            if (answer.action !== 'accept') {
                return { content: [{ type: 'text', text: `not painted (${answer.action})` }] };
            }
            return { content: [{ type: 'text', text: `painted ${answer.content?.colour}` }] };
        }
    );
    return server;
}

const handler = createMcpHandler(factory, {
    legacy: 'reject',
    onerror: (error) => log({ error: error.message })
});

const MAX_BODY = 1 << 20;

http.createServer(async (req, res) => {
    try {
        const chunks = [];
        let size = 0;
        for await (const chunk of req) {
            size += chunk.length;
            if (size > MAX_BODY) {
                res.writeHead(413).end();
                return;
            }
            chunks.push(chunk);
        }
        const body = chunks.length ? Buffer.concat(chunks) : undefined;
        if (body) {
            try {
                const msg = JSON.parse(body.toString('utf8'));
                for (const m of Array.isArray(msg) ? msg : [msg]) {
                    log({ method: m.method ?? null, id: m.id ?? null });
                }
            } catch {
                log({ method: null, invalid: true });
            }
        }
        const request = new Request(`http://127.0.0.1:${port}${req.url}`, {
            method: req.method,
            headers: req.headers,
            body: req.method === 'GET' || req.method === 'HEAD' ? undefined : body
        });
        const response = await handler.fetch(request);
        res.writeHead(response.status, Object.fromEntries(response.headers));
        if (!response.body) {
            res.end();
            return;
        }
        if ((response.headers.get('content-type') || '').startsWith('application/json')) {
            const text = await response.text();
            try {
                const out = JSON.parse(text);
                if (out.error) log({ refused: out.error.code, message: out.error.message });
            } catch {
                // not for this log
            }
            res.end(text);
            return;
        }
        // An SSE stream: passed on as it comes.
        for await (const chunk of response.body) res.write(chunk);
        res.end();
    } catch (e) {
        log({ error: String(e) });
        if (!res.headersSent) res.writeHead(500);
        res.end();
    }
}).listen(port, '127.0.0.1');
