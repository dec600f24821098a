// Checks the gateway's HTTP API against its own OpenAPI document, with tools nobody at
// Fathom wrote: @readme/openapi-parser validates the document against the OpenAPI 3.1
// specification, Ajv (JSON Schema 2020-12, OpenAPI 3.1's dialect) compiles every schema
// in it, and then every documented operation is called for real: with a good request,
// without a token, with a wrong token, with a token lacking the scope, with bad
// arguments and over the rate limit. Every answer's status must be one the operation
// documents, and its body must validate against the schema documented for that status.
//
//   FATHOM_API_BASE          http://host:port of the gateway's API listener
//   FATHOM_TOKEN             a token with every scope
//   FATHOM_TOKEN_TOOLS_ONLY  a token with the tools scope only
//   FATHOM_TOKEN_THROTTLED   a token with every scope, a burst of 1 and next to no refill
//   FATHOM_PLAN              {"tools": {NAME: {"args": {...}}}, "requests": {"POST /path": body}}
//
// Prints {"openapi": version, "operations": {"GET /path": [statuses seen]}} on stdout;
// exits non-zero with every failure on stderr.
import fs from 'node:fs';
import { validate, dereference } from '@readme/openapi-parser';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

const base = need('FATHOM_API_BASE');
const tokens = {
  full: need('FATHOM_TOKEN'),
  toolsOnly: need('FATHOM_TOKEN_TOOLS_ONLY'),
  throttled: need('FATHOM_TOKEN_THROTTLED'),
  wrong: 'not-a-configured-token-0123456789',
};
const plan = JSON.parse(fs.readFileSync(need('FATHOM_PLAN'), 'utf8'));
const failures = [];

async function request(method, path, token, body) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(base + path, { method, headers, body });
  const text = await resp.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: resp.status, headers: resp.headers, contentType: resp.headers.get('content-type') ?? '', text, json };
}

async function main() {
  const got = await request('GET', '/api/v1/openapi.json', tokens.full);
  if (got.status !== 200 || got.json === undefined) throw new Error(`GET /api/v1/openapi.json: ${got.status} ${got.text}`);
  const doc = got.json;
  if (doc.openapi?.startsWith('3.1') !== true) throw new Error(`document is OpenAPI ${doc.openapi}, expected 3.1.x`);

  // The parser mutates what it is given: each step gets its own copy.
  const verdict = await validate(structuredClone(doc));
  if (!verdict.valid) {
    throw new Error(`openapi.json is not valid OpenAPI ${doc.openapi}:\n${JSON.stringify(verdict.errors, null, 2)}`);
  }
  if (verdict.warnings.length > 0) failures.push(`validator warnings: ${JSON.stringify(verdict.warnings)}`);
  const api = await dereference(structuredClone(doc));

  // strict: an unknown keyword or a contradictory schema is an error, not ignored as
  // the MCP SDK's lenient Ajv would.
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  addFormats(ajv);
  const compiled = new Map();
  const validatorFor = (where, schema) => {
    if (!compiled.has(schema)) {
      try {
        compiled.set(schema, ajv.compile(schema));
      } catch (err) {
        failures.push(`${where}: schema does not compile as JSON Schema 2020-12: ${err.message}`);
        compiled.set(schema, null);
      }
    }
    return compiled.get(schema);
  };

  // The throttled token's burst is one request: spent here, so every authenticated
  // operation below sees it over its limit.
  const spent = await request('GET', '/api/v1/health', tokens.throttled);
  if (spent.status !== 200) throw new Error(`the throttled token's first request answered ${spent.status}, want 200: ${spent.text}`);

  const operations = {};
  for (const [path, item] of Object.entries(api.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const key = `${method.toUpperCase()} ${path}`;
      const seen = new Set();
      for (const [status, r] of Object.entries(op.responses)) {
        for (const [type, media] of Object.entries(r.content ?? {})) validatorFor(`${key} ${status} ${type}`, media.schema);
      }
      const reqSchema = op.requestBody?.content?.['application/json']?.schema;
      if (reqSchema) validatorFor(`${key} request body`, reqSchema);

      // answer checks one call: the status the case expects, documented, with a body
      // that validates and the headers the document requires.
      const answer = async (label, token, body, want, wantCode) => {
        const r = await request(method.toUpperCase(), path, token, body);
        seen.add(r.status);
        const where = `${key} (${label})`;
        if (r.status !== want) failures.push(`${where}: status ${r.status}, want ${want}: ${r.text.slice(0, 300)}`);
        const documented = op.responses[String(r.status)] ?? op.responses.default;
        if (!documented) {
          failures.push(`${where}: status ${r.status} is not documented (documented: ${Object.keys(op.responses).join(', ')})`);
          return;
        }
        // Every answer of this API is JSON: a response with no documented body shape
        // leaves clients guessing, so it is a failure, not a pass.
        const media = documented.content?.['application/json'];
        if (!media) failures.push(`${where}: the ${r.status} response documents no application/json body`);
        else {
          if (!r.contentType.startsWith('application/json')) failures.push(`${where}: Content-Type ${r.contentType}, documented application/json`);
          const v = validatorFor(where, media.schema);
          if (r.json === undefined) failures.push(`${where}: body is not JSON: ${r.text.slice(0, 300)}`);
          else if (v && !v(r.json)) failures.push(`${where}: body does not match the documented ${r.status} schema: ${ajv.errorsText(v.errors)}`);
        }
        for (const [name, h] of Object.entries(documented.headers ?? {})) {
          const value = r.headers.get(name);
          if (h.required && value === null) failures.push(`${where}: documented header ${name} is missing`);
          else if (value !== null && h.schema?.type === 'integer' && !/^\d+$/.test(value)) failures.push(`${where}: header ${name}=${value} is not an integer`);
        }
        if (wantCode && r.json?.error?.code !== wantCode) failures.push(`${where}: error code ${r.json?.error?.code}, want ${wantCode}`);
      };

      let body;
      if (method === 'post') {
        const tool = path.startsWith('/api/v1/tools/') ? path.slice('/api/v1/tools/'.length) : null;
        const args = tool ? plan.tools?.[tool]?.args : plan.requests?.[key];
        if (args === undefined) {
          failures.push(`${key}: the plan has no request for this documented operation`);
          continue;
        }
        body = JSON.stringify(args);
      }
      const security = op.security ?? api.security ?? [];
      const open = security.length === 0;
      const optional = security.some((req) => Object.keys(req).length === 0);
      const scope = op['x-scope'];

      await answer('good request', tokens.full, body, 200);
      if (open) {
        await answer('no token', '', body, 200);
      } else {
        await answer('wrong token', tokens.wrong, body, 401, 'unauthenticated');
        await answer('no token', '', body, optional ? 200 : 401, optional ? undefined : 'unauthenticated');
      }
      if (scope) {
        await answer('tools-only token', tokens.toolsOnly, body, scope === 'tools' ? 200 : 403, scope === 'tools' ? undefined : 'forbidden');
      }
      if (method === 'post') {
        await answer('unknown argument', tokens.full, JSON.stringify({ no_such_argument: 1 }), 400, 'invalid_argument');
        await answer('body is not JSON', tokens.full, '{"sql":', 400, 'invalid_argument');
      }
      if (!open) {
        await answer('over the rate limit', tokens.throttled, body, 429, 'rate_limited');
      }
      operations[key] = [...seen].sort((a, b) => a - b);
    }
  }
  if (failures.length > 0) throw new Error(failures.join('\n'));
  process.stdout.write(JSON.stringify({ openapi: doc.openapi, operations }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`openapi conformance:\n${err.message}\n`);
  process.exit(1);
});
