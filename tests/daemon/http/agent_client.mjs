// The client side of agent_apis_test: minferd driven by the official
// clients agents use. Anthropic's `@anthropic-ai/sdk` on /v1/messages
// (forced tool_use blocks judged by ajv against their input_schema, a
// streamed message through the SDK's MessageStream, tool history, the 400s
// for bad input, x-api-key tenants); the `openai` client's
// responses.create and responses.stream on /v1/responses (forced function
// calls judged by ajv, text output, tool history, 400s); and the Vercel AI
// SDK (`ai` through `@ai-sdk/openai-compatible`) running a two-step tool
// loop on /v1/chat/completions. Prints one JSON object.
//
//   node agent_client.mjs NODE_MODULES BASE_URL
//
// Model "q": random-weight Qwen3 (Hermes <tool_call>, <think>). Keys: "key-a"
// (a tenant that may use q), "key-b" (a tenant that may not).
import path from "node:path";
import {createRequire} from "node:module";
import {pathToFileURL} from "node:url";

const [modules, baseURL] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.resolve(modules, p)).href);
const {default: Anthropic} = await load("@anthropic-ai/sdk/index.mjs");
const require = createRequire(path.resolve(modules) + path.sep);
const Ajv2020 = require("ajv/dist/2020").default;
const ajv = new Ajv2020({strict: false});

const out = {};

// Finite by construction, so a random model's walk ends.
const schemas = {
  get_weather: {type: "object", properties: {
    city: {type: "string", minLength: 1, maxLength: 8},
    days: {type: "integer", minimum: 1, maximum: 7}},
    required: ["city", "days"], additionalProperties: false},
  set_alarm: {type: "object", properties: {
    hour: {type: "integer", minimum: 0, maximum: 23},
    minute: {type: "integer", minimum: 0, maximum: 59}},
    required: ["hour", "minute"], additionalProperties: false},
};
const validators = Object.fromEntries(
    Object.entries(schemas).map(([name, s]) => [name, ajv.compile(s)]));
function judge(name, args, named) {
  const validate = validators[name];
  const valid = validate !== undefined && validate(args) === true;
  return {name, known: validate !== undefined, valid, matches_choice: !named || named === name,
          errors: valid || !validate ? null : JSON.stringify(validate.errors)};
}
async function caught(fn) {
  try {
    const r = await fn();
    return {thrown: false, result: r};
  } catch (e) {
    return {thrown: true, status: e.status ?? null, body: e.error ?? null,
            message: e.message ?? String(e)};
  }
}

// ---- Anthropic Messages ----
{
  const client = new Anthropic({baseURL, apiKey: "key-a", maxRetries: 0, timeout: 120000});
  const tools = Object.entries(schemas).map(([name, input_schema]) =>
      ({name, description: `the ${name} tool`, input_schema}));
  const messages = [{role: "user", content: "What is the weather in Oslo, and wake me at 7?"}];
  const judgeMessage = (m, named) => ({
    stop_reason: m.stop_reason, id: m.id, type: m.type, role: m.role,
    usage_ok: m.usage.input_tokens > 0 && m.usage.output_tokens > 0,
    text: m.content.filter((b) => b.type === "text").map((b) => b.text).join(""),
    calls: m.content.filter((b) => b.type === "tool_use").map((b) => ({
      id: b.id, input_is_object: typeof b.input === "object", ...judge(b.name, b.input, named)})),
  });
  out.anthropic = {forced: []};
  for (let seed = 1; seed <= 2; ++seed) {
    const m = await client.messages.create({
      model: "q", max_tokens: 300, temperature: 1, messages, tools, system: "You call tools.",
      tool_choice: {type: "any", disable_parallel_tool_use: seed === 1}});
    out.anthropic.forced.push({choice: "any", stream: false, parallel: seed !== 1, ...judgeMessage(m)});
  }
  {
    const m = await client.messages.create({
      model: "q", max_tokens: 300, temperature: 1, messages, tools,
      tool_choice: {type: "tool", name: "set_alarm"}});
    out.anthropic.forced.push({choice: "set_alarm", stream: false, parallel: true,
                               ...judgeMessage(m, "set_alarm")});
  }
  // Streamed: the SDK folds the events into its final message. One call
  // (parallel use off), so the streamed input_json pieces are that call's.
  {
    const stream = client.messages.stream({
      model: "q", max_tokens: 300, temperature: 1, messages, tools,
      tool_choice: {type: "tool", name: "get_weather", disable_parallel_tool_use: true}});
    const types = [];
    let json = "";
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === "content_block_delta" && e.delta.type === "input_json_delta") {
        json += e.delta.partial_json;
      }
    }
    const m = await stream.finalMessage();
    out.anthropic.forced.push({choice: "get_weather", stream: true, parallel: false, types,
                               streamed_json: json, ...judgeMessage(m, "get_weather")});
  }
  // A streamed text reply, cut at max_tokens.
  {
    const stream = client.messages.stream({
      model: "q", max_tokens: 12, temperature: 1, messages,
      thinking: {type: "disabled"}});
    let text = "";
    const types = [];
    stream.on("text", (t) => { text += t; });
    for await (const e of stream) types.push(e.type);
    const m = await stream.finalMessage();
    out.anthropic.text = {types, text, final_text: m.content.filter((b) => b.type === "text")
                              .map((b) => b.text).join(""),
                          stop_reason: m.stop_reason, output_tokens: m.usage.output_tokens};
  }
  // A tool loop's second request: the call and its (failed) result.
  {
    const m = await client.messages.create({
      model: "q", max_tokens: 8, temperature: 1, tools, thinking: {type: "enabled", budget_tokens: 1024},
      messages: [...messages,
                 {role: "assistant", content: [
                   {type: "text", text: "Let me look."},
                   {type: "tool_use", id: "toolu_1", name: "get_weather", input: {city: "Oslo", days: 1}}]},
                 {role: "user", content: [
                   {type: "tool_result", tool_use_id: "toolu_1", is_error: true,
                    content: [{type: "text", text: "service down"}]},
                   {type: "text", text: "Try again?"}]}]});
    out.anthropic.history = {stop_reason: m.stop_reason, input_tokens: m.usage.input_tokens};
  }
  const bad = (extra) => caught(() => client.messages.create(
      {model: "q", max_tokens: 4, messages, ...extra}));
  out.anthropic.bad = {
    unknown_tool_result: await bad({messages: [...messages,
        {role: "assistant", content: "ok"},
        {role: "user", content: [{type: "tool_result", tool_use_id: "toolu_nope", content: "x"}]}]}),
    image: await bad({messages: [{role: "user", content: [
        {type: "image", source: {type: "base64", media_type: "image/png", data: "AAAA"}}]}]}),
    no_max_tokens: await caught(() => client.post("/v1/messages", {body: {model: "q", messages}})),
    unknown_tool: await bad({tools, tool_choice: {type: "tool", name: "nope"}}),
  };
  // The neighbour of the refusals is served.
  out.anthropic.after_bad = (await caught(() => client.messages.create(
      {model: "q", max_tokens: 2, messages}))).result?.stop_reason ?? null;
  // Tenants through x-api-key (and a bearer token).
  const as = (opts) => new Anthropic({baseURL, maxRetries: 0, ...opts});
  const one = (c) => caught(() => c.messages.create({model: "q", max_tokens: 1, messages}));
  const strip = (r) => ({thrown: r.thrown, status: r.status ?? 200,
                         type: r.body?.error?.type ?? null});
  out.anthropic.auth = {
    other_tenant: strip(await one(as({apiKey: "key-b"}))),
    bad_key: strip(await one(as({apiKey: "key-nope"}))),
    bearer: strip(await one(as({apiKey: null, authToken: "key-a"}))),
  };
}

// ---- OpenAI Responses ----
{
  const {default: OpenAI} = await load("openai/index.mjs");
  const client = new OpenAI({baseURL: `${baseURL}/v1`, apiKey: "key-a", maxRetries: 0,
                             timeout: 120000});
  const tools = Object.entries(schemas).map(([name, parameters]) =>
      ({type: "function", name, description: `the ${name} tool`, parameters, strict: true}));
  const input = "What is the weather in Oslo, and wake me at 7?";
  const judgeResponse = (r, named) => ({
    id: r.id, object: r.object, status: r.status, output_text: r.output_text,
    usage_ok: r.usage.input_tokens > 0 && r.usage.output_tokens > 0,
    types: r.output.map((o) => o.type),
    calls: r.output.filter((o) => o.type === "function_call").map((o) => {
      let args = null;
      try { args = JSON.parse(o.arguments); } catch (e) {}
      return {call_id: o.call_id, parses: args !== null, ...judge(o.name, args, named)};
    }),
  });
  out.responses = {forced: []};
  {
    const r = await client.responses.create({
      model: "q", input, tools, tool_choice: "required", temperature: 1,
      max_output_tokens: 300, parallel_tool_calls: false});
    out.responses.forced.push({stream: false, ...judgeResponse(r)});
  }
  {
    const r = await client.responses.create({
      model: "q", input, tools, tool_choice: {type: "function", name: "set_alarm"},
      temperature: 1, max_output_tokens: 300, instructions: "You call tools.",
      parallel_tool_calls: false});
    out.responses.forced.push({stream: false, ...judgeResponse(r, "set_alarm")});
  }
  {
    const stream = client.responses.stream({
      model: "q", input, tools, tool_choice: {type: "function", name: "get_weather"},
      temperature: 1, max_output_tokens: 300, parallel_tool_calls: false});
    const types = [];
    let seq_ok = true, last = -1, args = "";
    for await (const e of stream) {
      types.push(e.type);
      if (!(e.sequence_number > last)) seq_ok = false;
      last = e.sequence_number;
      if (e.type === "response.function_call_arguments.delta") args += e.delta;
    }
    const r = await stream.finalResponse();
    out.responses.forced.push({stream: true, event_types: types, seq_ok, streamed_args: args,
                               ...judgeResponse(r, "get_weather")});
  }
  // Text, plain and streamed, cut at max_output_tokens.
  {
    const r = await client.responses.create({
      model: "q", input, temperature: 1, max_output_tokens: 10, reasoning: {effort: "none"}});
    out.responses.text = judgeResponse(r);
    out.responses.text.incomplete_reason = r.incomplete_details?.reason ?? null;
    const stream = client.responses.stream({
      model: "q", input, temperature: 1, max_output_tokens: 10, reasoning: {effort: "none"}});
    let deltas = "";
    const types = [];
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === "response.output_text.delta") deltas += e.delta;
    }
    out.responses.text_stream = {types, deltas};
  }
  // A tool loop's second request: the call and its output as items.
  {
    const r = await client.responses.create({
      model: "q", tools, temperature: 1, max_output_tokens: 8, input: [
        {role: "user", content: [{type: "input_text", text: input}]},
        {type: "function_call", call_id: "call_1", name: "get_weather",
         arguments: '{"city": "Oslo", "days": 1}'},
        {type: "function_call_output", call_id: "call_1", output: '{"temp": -3}'}]});
    out.responses.history = {status: r.status, input_tokens: r.usage.input_tokens};
  }
  const bad = (extra) => caught(() => client.responses.create(
      {model: "q", input, max_output_tokens: 4, ...extra}));
  const strip = (r) => ({thrown: r.thrown, status: r.status, param: r.body?.param ?? null,
                         message: r.body?.message ?? r.message});
  out.responses.bad = {
    previous: strip(await bad({previous_response_id: "resp_1"})),
    unknown_output: strip(await bad({input: [
        {role: "user", content: input},
        {type: "function_call_output", call_id: "call_nope", output: "x"}]})),
    unknown_tool: strip(await bad({tools, tool_choice: {type: "function", name: "nope"}})),
    image: strip(await bad({input: [{role: "user", content: [
        {type: "input_image", image_url: "https://example.com/a.png"}]}]})),
  };
  out.responses.after_bad = (await caught(() => client.responses.create(
      {model: "q", input, max_output_tokens: 2}))).result?.status ?? null;
}

// ---- Vercel AI SDK: a tool loop ----
{
  const {generateText, tool, jsonSchema, stepCountIs} = await load("ai/dist/index.mjs");
  const {createOpenAICompatible} = await load("@ai-sdk/openai-compatible/dist/index.mjs");
  const provider = createOpenAICompatible({name: "minfer", baseURL: `${baseURL}/v1`,
                                           apiKey: "key-a"});
  const executed = [];
  const r = await generateText({
    model: provider("q"), prompt: "What is the weather in Oslo?", temperature: 1, seed: 3,
    // Room for the most a forced reply can hold (16 calls of bounded
    // arguments), so the grammar, not the limit, ends the first step.
    maxOutputTokens: 2000, maxRetries: 0,
    tools: {get_weather: tool({
      description: "Current weather of a city", inputSchema: jsonSchema(schemas.get_weather),
      execute: async (args) => {
        executed.push(args);
        return {temperature: -3};
      }})},
    stopWhen: stepCountIs(2),
    // The model is random: the first step is forced to call, the second to answer.
    prepareStep: async ({stepNumber}) => ({toolChoice: stepNumber === 0 ? "required" : "none"}),
  });
  out.vercel = {
    steps: r.steps.map((s) => ({
      finish_reason: s.finishReason,
      calls: s.toolCalls.map((c) => ({name: c.toolName, invalid: c.invalid ?? false,
                                      ...judge(c.toolName, c.input)})),
      results: s.toolResults.map((t) => t.output),
    })),
    executed: executed.map((a) => validators.get_weather(a) === true),
    text_is_string: typeof r.text === "string",
  };
}

process.stdout.write(JSON.stringify(out));
