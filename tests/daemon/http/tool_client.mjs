// The client side of tool_calls_test: tool calls over minferd's
// /v1/chat/completions with the official `openai` npm package. Forced calls
// (tool_choice "required" and a named function) on random-weight models at
// temperature 1, plain and streamed (the SDK's stream of delta.tool_calls,
// folded by index), each call judged by ajv against its tool's parameters;
// a tool history round trip; and the 400s for bad tool input. Prints one
// JSON object.
//
//   node tool_client.mjs NODE_MODULES BASE_URL
//
// Models: "q" (Qwen3's template: Hermes <tool_call>) and "l" (Llama 3.2's:
// JSON calls).
import path from "node:path";
import {createRequire} from "node:module";
import {pathToFileURL} from "node:url";

const [modules, baseURL] = process.argv.slice(2);
const {default: OpenAI} = await import(
    pathToFileURL(path.resolve(modules, "openai", "index.mjs")).href);
const require = createRequire(path.resolve(modules) + path.sep);
const Ajv2020 = require("ajv/dist/2020").default;

const client = new OpenAI({baseURL: `${baseURL}/v1`, apiKey: "none", maxRetries: 0,
                           timeout: 120000});
const ajv = new Ajv2020({strict: false});

// Finite by construction, so a random model's walk ends. A forced reply
// holds at most 16 calls (kMaxForcedToolCalls), each of bounded arguments:
// MAX_FORCED tokens hold the longest, so the grammar, not the limit, ends it.
const MAX_FORCED = 2000;
const tools = [
  {type: "function", function: {
    name: "get_weather", description: "Current weather of a city",
    parameters: {type: "object", properties: {
      city: {type: "string", minLength: 1, maxLength: 8},
      days: {type: "integer", minimum: 1, maximum: 7},
      units: {enum: ["C", "F"]}},
      required: ["city", "days"], additionalProperties: false}}},
  {type: "function", function: {
    name: "set_alarm", strict: true,
    parameters: {type: "object", properties: {
      hour: {type: "integer", minimum: 0, maximum: 23},
      minute: {type: "integer", minimum: 0, maximum: 59},
      label: {type: "string", maxLength: 6}},
      required: ["hour", "minute"], additionalProperties: false}}},
  // No arguments: an empty object schema (a tool without parameters is a 400).
  {type: "function", function: {name: "ping", description: "Is the service up?",
                                parameters: {type: "object", properties: {}}}},
];
const validators = Object.fromEntries(tools.map((t) => [
  t.function.name,
  ajv.compile(t.function.parameters ?? {type: "object", maxProperties: 0})]));

// One call's verdict.
function judgeCall(call, named) {
  const name = call.function?.name;
  let args, parses = true;
  try {
    args = JSON.parse(call.function?.arguments);
  } catch (e) {
    parses = false;
  }
  const validate = validators[name];
  const valid = parses && validate !== undefined && validate(args) === true;
  return {name, arguments: call.function?.arguments, id: call.id, type: call.type,
          parses, valid, known: validate !== undefined,
          matches_choice: named === undefined || name === named,
          errors: valid || !validate ? null : JSON.stringify(validate.errors)};
}

const messages = [{role: "user", content: "What is the weather in Oslo, and wake me at 7?"}];

function choiceFor(named) {
  return named === undefined ? "required" : {type: "function", function: {name: named}};
}

async function plain(model, seed, named, parallel) {
  const r = await client.chat.completions.create({
    model, messages, tools, tool_choice: choiceFor(named), parallel_tool_calls: parallel,
    temperature: 1, seed, max_tokens: MAX_FORCED,
  });
  const c = r.choices[0];
  return {model, seed, named: named ?? null, parallel, stream: false,
          finish_reason: c.finish_reason, content: c.message.content,
          calls: (c.message.tool_calls ?? []).map((t) => judgeCall(t, named))};
}

async function streamed(model, seed, named, parallel) {
  const stream = await client.chat.completions.create({
    model, messages, tools, tool_choice: choiceFor(named), parallel_tool_calls: parallel,
    temperature: 1, seed, max_tokens: MAX_FORCED, stream: true,
  });
  const calls = [];
  let finish = null, content = "", first_deltas_ok = true;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    finish = choice.finish_reason ?? finish;
    content += choice.delta?.content ?? "";
    for (const d of choice.delta?.tool_calls ?? []) {
      if (calls[d.index] === undefined) {
        // The first delta of a call names it.
        if (!d.id || d.type !== "function" || !d.function?.name) first_deltas_ok = false;
        calls[d.index] = {id: d.id, type: d.type,
                          function: {name: d.function?.name ?? "", arguments: ""}};
      }
      calls[d.index].function.arguments += d.function?.arguments ?? "";
    }
  }
  return {model, seed, named: named ?? null, parallel, stream: true, finish_reason: finish,
          content, first_deltas_ok, calls: calls.map((t) => judgeCall(t, named))};
}

const out = {forced: []};
for (const model of ["q", "l"]) {
  const parallel = model === "q";  // Llama 3.2 makes one call per turn
  for (let seed = 1; seed <= 3; ++seed) out.forced.push(await plain(model, seed, undefined, false));
  out.forced.push(await plain(model, 4, undefined, parallel));
  out.forced.push(await plain(model, 5, "set_alarm", false));
  out.forced.push(await plain(model, 6, "ping", false));
  out.forced.push(await streamed(model, 7, undefined, false));
  out.forced.push(await streamed(model, 8, "get_weather", parallel));
}

// A tool loop's second request: the call and its result in the history.
{
  const r = await client.chat.completions.create({
    model: "q", tools, temperature: 1, seed: 3, max_tokens: 8,
    messages: [...messages,
               {role: "assistant", content: null, tool_calls: [
                 {id: "call_1", type: "function",
                  function: {name: "get_weather", arguments: '{"city": "Oslo", "days": 1}'}}]},
               {role: "tool", tool_call_id: "call_1", content: '{"temp": -3}'}],
  });
  out.history = {finish_reason: r.choices[0].finish_reason,
                 prompt_tokens: r.usage.prompt_tokens};
}

async function caught(fn) {
  try {
    await fn();
    return {thrown: false};
  } catch (e) {
    return {thrown: true, status: e.status ?? null, param: e.param ?? null,
            message: e.message ?? String(e)};
  }
}
const bad = (extra) => caught(() => client.chat.completions.create(
    {model: "q", messages, max_tokens: 4, ...extra}));
out.bad = {
  unknown_tool: await bad({tools, tool_choice: {type: "function", function: {name: "nope"}}}),
  no_name: await bad({tools: [{type: "function", function: {description: "x"}}]}),
  no_parameters: await bad({tools: [{type: "function", function: {name: "f"}}]}),
  no_tools: await bad({tool_choice: "required"}),
  history_args: await bad({tools, messages: [...messages,
      {role: "assistant", tool_calls: [{id: "c", type: "function",
                                        function: {name: "ping", arguments: "{not json"}}]},
      {role: "tool", tool_call_id: "c", content: "x"}]}),
  refused_schema: await bad({tools: [{type: "function", function: {name: "f",
      parameters: {type: "object", propertyNames: {maxLength: 3}}}}], tool_choice: "required"}),
  with_format: await bad({tools, tool_choice: "required",
                          response_format: {type: "json_object"}}),
};
process.stdout.write(JSON.stringify(out));
