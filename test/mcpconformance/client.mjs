// An MCP client nobody at Fathom wrote: the official TypeScript SDK, driven against a
// real Fathom Echo server. Fathom's Go tests use the Go SDK, which shares Fathom's
// assumptions; this one rejected a whole tools/list once (an outputSchema of type
// ["null","object"]), so CI runs it to catch what only a third-party client sees.
//
//   node client.mjs http     FATHOM_MCP_URL, FATHOM_TOKEN (scopes tools+sql),
//                            FATHOM_TOKEN_TOOLS_ONLY (scope tools)
//   node client.mjs stdio    FATHOM_BIN, FATHOM_DB, FATHOM_RATES: spawns `fathom mcp --db`
//   both read FATHOM_PLAN, a JSON file: {"tools": {NAME: {"args": {...}, "bad": [{...}]}},
//                                        "prompt": {"name": ..., "arguments": {...}}}
//
// It prints one JSON summary on stdout for the Go test to check value by value, and exits
// non-zero with a message on stderr when the SDK or a protocol-level check refuses
// something (a schema the SDK cannot compile, structured content that does not validate,
// a listed tool the plan has no case for).
import fs from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

class ConformanceError extends Error {}

function need(name) {
  const v = process.env[name];
  if (!v) throw new ConformanceError(`${name} is not set`);
  return v;
}

function check(ok, message) {
  if (!ok) throw new ConformanceError(message);
}

// A tool result's text, which for an error result is the whole message.
function textOf(result) {
  return (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

function httpTransport(url, token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
}

async function connect(transport) {
  const client = new Client({ name: 'fathom-conformance', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

// exercise runs the same conversation over whichever transport: what it returns is
// the part of the summary both transports share.
async function exercise(client, transport, plan) {
  const summary = {
    sdkLatestProtocol: LATEST_PROTOCOL_VERSION,
    protocolVersion: transport.protocolVersion ?? null,
    server: client.getServerVersion(),
    capabilities: Object.keys(client.getServerCapabilities() ?? {}).sort(),
    tools: [],
    calls: {},
    badCalls: {},
    answeredAfterBad: 0,
  };
  const caps = client.getServerCapabilities() ?? {};

  // listTools makes the SDK compile every outputSchema with its own Ajv; a schema it
  // cannot compile, or a tool its zod types refuse, throws here.
  check(caps.tools, 'server does not declare the tools capability');
  const { tools } = await client.listTools();
  summary.tools = tools.map((t) => t.name);
  for (const t of tools) {
    check(t.inputSchema?.type === 'object', `tool ${t.name}: inputSchema type is ${JSON.stringify(t.inputSchema?.type)}, MCP requires "object"`);
    check(t.outputSchema === undefined || t.outputSchema.type === 'object',
      `tool ${t.name}: outputSchema type is ${JSON.stringify(t.outputSchema?.type)}, MCP requires "object"`);
    check(t.outputSchema !== undefined, `tool ${t.name} has no outputSchema: its structured result cannot be validated`);
  }
  const unplanned = summary.tools.filter((n) => !plan.tools[n]);
  check(unplanned.length === 0,
    `no conformance case for tool(s) ${unplanned.join(', ')}: add valid arguments and expected results to conformanceCases in extension/echoextension/conformance_test.go`);

  for (const t of tools) {
    const c = plan.tools[t.name];
    // callTool validates structuredContent against the tool's outputSchema and throws
    // when it does not match: that is the SDK's check, not ours.
    const result = await client.callTool({ name: t.name, arguments: c.args });
    check(!result.isError, `tool ${t.name} with ${JSON.stringify(c.args)}: error result: ${textOf(result)}`);
    check(result.structuredContent !== undefined, `tool ${t.name}: no structuredContent`);
    // Clients that ignore structuredContent show the text: it must say the same.
    let text;
    try {
      text = JSON.parse(textOf(result));
    } catch (err) {
      throw new ConformanceError(`tool ${t.name}: text content is not the JSON of the result: ${err.message}`);
    }
    check(isDeepStrictEqual(text, result.structuredContent), `tool ${t.name}: text content and structuredContent differ`);
    summary.calls[t.name] = result.structuredContent;

    // An argument no schema has is the one bad input every tool must refuse; the plan
    // adds each tool's own (a bad time, a value out of range).
    summary.badCalls[t.name] = [];
    for (const args of [{ no_such_argument: 1 }, ...(c.bad ?? [])]) {
      const bad = await client.callTool({ name: t.name, arguments: args });
      summary.badCalls[t.name].push({ args, isError: bad.isError === true, text: textOf(bad) });
      await client.ping();
      summary.answeredAfterBad++;
    }
  }

  if (caps.prompts) {
    const { prompts } = await client.listPrompts();
    summary.prompts = prompts.map((p) => ({ name: p.name, arguments: (p.arguments ?? []).map((a) => a.name) }));
    const got = await client.getPrompt(plan.prompt);
    summary.prompt = {
      description: got.description,
      messages: got.messages.map((m) => ({ role: m.role, type: m.content.type, text: m.content.text })),
    };
  }
  // Resources are optional in MCP: read them only where the server says it has them.
  if (caps.resources) {
    const { resources } = await client.listResources();
    summary.resources = [];
    for (const r of resources) {
      const read = await client.readResource({ uri: r.uri });
      summary.resources.push({
        uri: r.uri, name: r.name, mimeType: r.mimeType,
        contents: read.contents.map((c) => ({ uri: c.uri, mimeType: c.mimeType, text: c.text })),
      });
    }
  }
  return summary;
}

async function overHTTP(plan) {
  const url = need('FATHOM_MCP_URL');
  const transport = httpTransport(url, need('FATHOM_TOKEN'));
  const client = await connect(transport);
  const summary = { transport: 'http', ...(await exercise(client, transport, plan)) };
  await client.close();

  // A token without the sql scope lists every tool but is refused run_analysis, as a
  // tool error the agent can read, not a protocol failure.
  const viewer = await connect(httpTransport(url, need('FATHOM_TOKEN_TOOLS_ONLY')));
  const viewerTools = (await viewer.listTools()).tools.map((t) => t.name);
  const refused = await viewer.callTool({ name: 'run_analysis', arguments: plan.tools.run_analysis.args });
  summary.toolsOnlyToken = { tools: viewerTools, runAnalysis: { isError: refused.isError === true, text: textOf(refused) } };
  await viewer.close();

  // Without a token there is no session at all.
  try {
    const anonymous = await connect(httpTransport(url, ''));
    await anonymous.close();
    summary.noToken = 'connected';
  } catch (err) {
    summary.noToken = err.message;
  }
  return summary;
}

async function overStdio(plan) {
  const args = ['mcp', '--db', need('FATHOM_DB')];
  if (process.env.FATHOM_RATES) args.push('--rates', process.env.FATHOM_RATES);
  // The server writes its audit lines to stderr; kept for the failure message.
  const transport = new StdioClientTransport({ command: need('FATHOM_BIN'), args, stderr: 'pipe' });
  let serverLog = '';
  transport.stderr?.on('data', (d) => { serverLog += d; });
  try {
    const client = await connect(transport);
    const summary = { transport: 'stdio', ...(await exercise(client, transport, plan)) };
    await client.close();
    return summary;
  } catch (err) {
    err.message += `\n--- fathom mcp stderr ---\n${serverLog}`;
    throw err;
  }
}

async function main() {
  const mode = process.argv[2];
  const plan = JSON.parse(fs.readFileSync(need('FATHOM_PLAN'), 'utf8'));
  let summary;
  if (mode === 'http') summary = await overHTTP(plan);
  else if (mode === 'stdio') summary = await overStdio(plan);
  else throw new ConformanceError(`usage: node client.mjs http|stdio (got ${JSON.stringify(mode)})`);
  process.stdout.write(JSON.stringify(summary) + '\n');
}

main().catch((err) => {
  process.stderr.write(`conformance: ${err instanceof ConformanceError ? '' : (err.constructor?.name ?? 'error') + ': '}${err.message}\n`);
  process.exit(1);
});
