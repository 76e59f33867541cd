// The client side of structured_output_test: constrained generations over
// minferd's HTTP API with the official `openai` npm package (OpenAI's
// response_format, llama-server's grammar, vLLM's structured_outputs and
// guided_* fields, which the SDK passes through), each output judged by an
// independent reference: ajv (JSON Schema draft 2020-12) for schemas, JS
// RegExp for regexes, membership for choices. It also judges the outputs
// the C++ test got over gRPC (GRPC_OUTPUTS.json). Prints one JSON object.
//
//   node structured_client.mjs NODE_MODULES BASE_URL MODEL GRPC_OUTPUTS.json
//
// GRPC_OUTPUTS: {"schema": {...}, "json": [{"text", "finish"}], "regex": "...",
//                "regex_outputs": [...], "choices": [...], "choice_outputs": [...]}
import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";
import {pathToFileURL} from "node:url";

const [modules, baseURL, model, grpcFile] = process.argv.slice(2);
const {default: OpenAI} = await import(
    pathToFileURL(path.resolve(modules, "openai", "index.mjs")).href);
const require = createRequire(path.resolve(modules) + path.sep);
const Ajv2020 = require("ajv/dist/2020").default;
const addFormatsModule = require("ajv-formats");
const addFormats = addFormatsModule.default ?? addFormatsModule;

const client = new OpenAI({baseURL: `${baseURL}/v1`, apiKey: "none", maxRetries: 0,
                           timeout: 120000});
const grpc = JSON.parse(fs.readFileSync(grpcFile, "utf8"));
const schema = grpc.schema;
const ajv = new Ajv2020({strict: false, validateFormats: true});
addFormats(ajv);
const validate = ajv.compile(schema);
const out = {};

// A JSON text's verdict: parses, and validates against the schema.
function judgeJson(text, check = validate) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return {text, parses: false, valid: false, error: String(e)};
  }
  const valid = check(value) === true;
  return {text, parses: true, valid, error: valid ? null : JSON.stringify(check.errors)};
}

function fullMatch(re, text) {
  return new RegExp(`^(?:${re})$`, "u").test(text);
}

async function caught(fn) {
  try {
    await fn();
    return {thrown: false};
  } catch (e) {
    return {thrown: true, status: e.status ?? null, param: e.param ?? null, type: e.type ?? null,
            message: e.message ?? String(e)};
  }
}

const messages = [{role: "user", content: "Describe a person as JSON."}];

// OpenAI's json_schema at temperature 1, several seeds (chat, not streamed).
out.json_schema = [];
for (let seed = 1; seed <= 6; ++seed) {
  const r = await client.chat.completions.create({
    model, messages, temperature: 1, seed, max_tokens: 400,
    response_format: {type: "json_schema",
                      json_schema: {name: "person", strict: true, schema}},
  });
  const c = r.choices[0];
  out.json_schema.push({finish_reason: c.finish_reason, ...judgeJson(c.message.content)});
}

// vLLM's structured_outputs.json on /v1/completions, streamed.
{
  const stream = await client.completions.create({
    model, prompt: "A person:", temperature: 1, seed: 7, max_tokens: 400, stream: true,
    structured_outputs: {json: schema},
  });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  out.json_stream = {finish_reason: finish, ...judgeJson(text)};
}

// JSON mode: any JSON object.
{
  const r = await client.chat.completions.create({
    model, messages, temperature: 1, seed: 3, max_tokens: 400,
    response_format: {type: "json_object"},
  });
  const c = r.choices[0];
  const objectOnly = ajv.compile({type: "object"});
  out.json_object = {finish_reason: c.finish_reason, ...judgeJson(c.message.content, objectOnly)};
}

// A regex (vLLM's structured_outputs.regex), judged by RegExp.
out.regex = [];
for (let seed = 1; seed <= 3; ++seed) {
  const r = await client.completions.create({
    model, prompt: "A code:", temperature: 1, seed, max_tokens: 64,
    structured_outputs: {regex: grpc.regex},
  });
  const c = r.choices[0];
  out.regex.push({text: c.text, finish_reason: c.finish_reason,
                  matches: fullMatch(grpc.regex, c.text)});
}

// A choice: vLLM's structured_outputs.choice (chat) and guided_choice.
out.choice = [];
for (let seed = 1; seed <= 3; ++seed) {
  const r = await client.chat.completions.create({
    model, messages: [{role: "user", content: "Pick a colour."}], temperature: 1, seed,
    max_tokens: 16, structured_outputs: {choice: grpc.choices},
  });
  const c = r.choices[0];
  out.choice.push({text: c.message.content, finish_reason: c.finish_reason,
                   member: grpc.choices.includes(c.message.content)});
}
{
  const r = await client.completions.create({
    model, prompt: "Colour:", temperature: 1, seed: 9, max_tokens: 16,
    guided_choice: grpc.choices,
  });
  const c = r.choices[0];
  out.choice.push({text: c.text, finish_reason: c.finish_reason,
                   member: grpc.choices.includes(c.text)});
}

// Logprobs under a choice: the constrained distribution, so every
// alternative offered at the first position starts one of the choices.
{
  const r = await client.chat.completions.create({
    model, messages: [{role: "user", content: "Pick a colour."}], temperature: 1, seed: 11,
    max_tokens: 16, logprobs: true, top_logprobs: 5, structured_outputs: {choice: grpc.choices},
  });
  const c = r.choices[0];
  const first = c.logprobs.content[0];
  out.choice_logprobs = {
    text: c.message.content,
    first_token: first.token,
    alternatives: first.top_logprobs.map((t) => ({token: t.token, logprob: t.logprob})),
    alternatives_start_a_choice: first.top_logprobs.every(
        (t) => grpc.choices.some((ch) => ch.startsWith(t.token))),
    logprobs_finite: c.logprobs.content.every(
        (p) => Number.isFinite(p.logprob) &&
               p.top_logprobs.every((t) => Number.isFinite(t.logprob))),
  };
}

// llama-server's grammar (GBNF).
{
  const r = await client.completions.create({
    model, prompt: "Answer:", temperature: 1, seed: 5, max_tokens: 16,
    grammar: 'root ::= "yes" | "no" | "maybe " [0-9]',
  });
  const c = r.choices[0];
  out.gbnf = {text: c.text, finish_reason: c.finish_reason,
              matches: /^(yes|no|maybe [0-9])$/.test(c.text)};
}

// A schema the engine cannot enforce, sent while another stream runs: a
// 400 naming the field and the keyword; the stream is not disturbed.
{
  const stream = await client.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 48, ignore_eos: true, stream: true,
    stream_options: {include_usage: true},
  });
  const it = stream[Symbol.asyncIterator]();
  let text = "", finish = null, usage = null, chunks = 0;
  const take = (chunk) => {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (c) {
      text += c.delta?.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  };
  const first = await it.next();
  if (!first.done) take(first.value);
  out.bad_schema = await caught(() => client.chat.completions.create({
    model, messages, max_tokens: 8,
    response_format: {type: "json_schema", json_schema: {name: "bad", schema: {
      type: "object", propertyNames: {maxLength: 3}}}},
  }));
  for (;;) {
    const n = await it.next();
    if (n.done) break;
    take(n.value);
  }
  out.neighbour = {finish_reason: finish, completion_tokens: usage?.completion_tokens ?? null,
                   chunks, text};
}

// Two constraints at once, a GBNF grammar with an undefined rule.
out.conflict = await caught(() => client.chat.completions.create({
  model, messages, max_tokens: 8, response_format: {type: "json_object"},
  grammar: 'root ::= "x"',
}));
out.bad_gbnf = await caught(() => client.completions.create({
  model, prompt: "x", max_tokens: 8, structured_outputs: {grammar: "root ::= item"},
}));

// The gRPC outputs, judged by the same references.
out.grpc = {
  json: grpc.json.map((o) => ({finish: o.finish, ...judgeJson(o.text)})),
  regex: grpc.regex_outputs.map((o) => ({finish: o.finish, text: o.text,
                                         matches: fullMatch(grpc.regex, o.text)})),
  choice: grpc.choice_outputs.map((o) => ({finish: o.finish, text: o.text,
                                           member: grpc.choices.includes(o.text)})),
};

console.log(JSON.stringify(out));
