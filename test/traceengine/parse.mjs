// Parses a trace file with the Chrome DevTools trace engine (@paulirish/trace_engine,
// the Performance panel's own model, pinned in package-lock.json) and prints what it
// made of it as JSON: each process with its name and each thread with its name and the
// complete slices and instants the engine placed on it, the flows it tied, and any
// error it raised. Fathom's tests compare this with what the store holds.
//
//   node parse.mjs trace.json
import fs from 'node:fs';

import * as Trace from '@paulirish/trace_engine';

// The engine measures layout with DOMRect, which node lacks; no Fathom event needs it.
globalThis.DOMRect ??= class DOMRect {
  constructor(x = 0, y = 0, width = 0, height = 0) {
    Object.assign(this, {x, y, width, height, top: y, left: x, right: x + width, bottom: y + height});
  }
};

const file = process.argv[2];
const parsed = JSON.parse(fs.readFileSync(file, 'utf8'));
const events = parsed.traceEvents;
if (!Array.isArray(events)) {
  throw new Error(`${file}: no traceEvents array`);
}

const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(events);
const parsedTrace = model.parsedTrace();
const data = parsedTrace?.data;
if (!data) {
  throw new Error('the trace engine made nothing of the trace');
}

const meta = data.Meta;
const processes = [];
for (const [pid, proc] of data.Renderer.processes) {
  const threads = [];
  for (const [tid, thread] of proc.threads) {
    const slices = thread.entries.filter(e => e.ph === 'X');
    const instants = thread.entries.filter(e => e.ph === 'I' || e.ph === 'i');
    threads.push({
      tid,
      name: meta.threadsInProcess.get(pid)?.get(tid)?.args?.name ?? null,
      slices: slices.length,
      slice_names: [...new Set(slices.map(e => e.name))].sort(),
      instants: instants.length,
      roots: thread.tree?.roots?.size ?? 0,
    });
  }
  threads.sort((a, b) => a.tid - b.tid);
  processes.push({pid, name: meta.processNames.get(pid)?.args?.name ?? null, threads});
}
processes.sort((a, b) => a.pid - b.pid);

const flows = data.Flows.flows.map(flow => flow.map(e => ({pid: e.pid, tid: e.tid, name: e.name, ts: e.ts})));

console.log(JSON.stringify({
  generic: meta.traceIsGeneric,
  events: events.length,
  processes,
  flows,
}));
