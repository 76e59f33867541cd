// The client side of http_api_test: drives minferd's HTTP API with the
// official `openai` npm package, as an application would, and prints what
// it saw as one JSON object (the C++ test compares it with gRPC's answers
// and checks the server's side).
//
//   node openai_client.mjs NODE_MODULES BASE_URL API_KEY MODEL [spec]
//
// With "spec", only the speculative-decoding checks run, on a MODEL loaded
// with a draft: usage.completion_tokens_details as the SDK parses it, in a
// response and in the streamed usage chunk, and the "speculative" opt-out.
//
// Extension fields (ignore_eos, return_token_ids) go in the request body
// as-is, as the SDK passes unknown parameters through.
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, baseURL, apiKey, model, mode] = process.argv.slice(2);
const {default: OpenAI} = await import(
    pathToFileURL(path.resolve(modules, "openai", "index.mjs")).href);

const client = new OpenAI({baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60000});
const messages = [{role: "system", content: "You are terse."},
                  {role: "user", content: "Name three colours."}];
const out = {};

// What an API error looks like to the SDK.
async function caught(fn) {
  try {
    await fn();
    return {thrown: false};
  } catch (e) {
    return {thrown: true, status: e.status ?? null, code: e.code ?? null, param: e.param ?? null,
            type: e.type ?? null, message: e.message ?? String(e)};
  }
}

if (mode === "spec") {
  const req = {model, messages, temperature: 0, max_tokens: 24, ignore_eos: true,
               return_token_ids: true};
  const chat = await client.chat.completions.create(req);
  out.chat = {usage: chat.usage, token_ids: chat.choices[0].token_ids,
              accepted: chat.usage.completion_tokens_details?.accepted_prediction_tokens ?? null,
              rejected: chat.usage.completion_tokens_details?.rejected_prediction_tokens ?? null};
  const stream = await client.chat.completions.create({
    ...req, stream: true, stream_options: {include_usage: true}});
  const s = {usage: null, token_ids: []};
  for await (const chunk of stream) {
    if (chunk.usage) s.usage = chunk.usage;
    s.token_ids.push(...(chunk.choices[0]?.token_ids ?? []));
  }
  out.stream = s;
  const off = await client.chat.completions.create({...req, speculative: false});
  out.off = {usage: off.usage, token_ids: off.choices[0].token_ids};
  out.bad = await caught(() => client.chat.completions.create({...req, speculative: "no"}));
  console.log(JSON.stringify(out));
  process.exit(0);
}

// Chat, not streaming, greedy.
const chat = await client.chat.completions.create({
  model, messages, temperature: 0, max_tokens: 24, ignore_eos: true, return_token_ids: true,
});
out.chat = {content: chat.choices[0].message.content, role: chat.choices[0].message.role,
            finish_reason: chat.choices[0].finish_reason, usage: chat.usage,
            token_ids: chat.choices[0].token_ids, object: chat.object, model: chat.model,
            id: chat.id};

// The same request streamed, with the usage chunk.
{
  const stream = await client.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 24, ignore_eos: true, return_token_ids: true,
    stream: true, stream_options: {include_usage: true},
  });
  const s = {content: "", token_ids: [], chunks: 0, first_role: null, finish_reason: null,
             usage: null, usage_chunk_choices: null, ids: new Set()};
  for await (const chunk of stream) {
    s.chunks++;
    s.ids.add(chunk.id);
    if (chunk.usage) {
      s.usage = chunk.usage;
      s.usage_chunk_choices = chunk.choices.length;
      continue;
    }
    const c = chunk.choices[0];
    if (s.chunks === 1) s.first_role = c.delta.role ?? null;
    s.content += c.delta.content ?? "";
    s.token_ids.push(...(c.token_ids ?? []));
    if (c.finish_reason) s.finish_reason = c.finish_reason;
  }
  s.ids = s.ids.size;
  out.chat_stream = s;
}

// Completions, streaming and not.
const completion = await client.completions.create({
  model, prompt: "The colours of the rainbow are", temperature: 0, max_tokens: 16,
  ignore_eos: true, return_token_ids: true,
});
out.completion = {text: completion.choices[0].text, finish_reason: completion.choices[0].finish_reason,
                  usage: completion.usage, token_ids: completion.choices[0].token_ids,
                  object: completion.object};
{
  const stream = await client.completions.create({
    model, prompt: "The colours of the rainbow are", temperature: 0, max_tokens: 16,
    ignore_eos: true, stream: true,
  });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  out.completion_stream = {text, finish_reason: finish};
}

// A stop string taken from the greedy text: the output ends before it.
{
  const greedy = out.completion.text;
  const stop = greedy.slice(Math.floor(greedy.length / 2), Math.floor(greedy.length / 2) + 3);
  const r = await client.completions.create({
    model, prompt: "The colours of the rainbow are", temperature: 0, max_tokens: 16,
    ignore_eos: true, stop: [stop],
  });
  out.stop = {stop, greedy, text: r.choices[0].text, finish_reason: r.choices[0].finish_reason};
}

// Seeds: the same seed twice, and another one.
{
  const sampled = async (seed) => (await client.chat.completions.create({
    model, messages, temperature: 1.0, seed, max_tokens: 24, ignore_eos: true,
    return_token_ids: true,
  })).choices[0].token_ids;
  out.seed = {a: await sampled(42), b: await sampled(42), c: await sampled(43)};
}

// Logprobs with two alternatives each.
{
  const r = await client.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 8, ignore_eos: true, logprobs: true,
    top_logprobs: 2, return_token_ids: true,
  });
  out.logprobs = {content: r.choices[0].logprobs.content, token_ids: r.choices[0].token_ids,
                  completion_tokens: r.usage.completion_tokens};
}

// Errors: an unknown model, a bad key, a bad field.
out.unknown_model = await caught(() => client.chat.completions.create({
  model: "no-such-model", messages}));
out.bad_key = await caught(() => new OpenAI({baseURL: `${baseURL}/v1`, apiKey: "wrong-key",
                                             maxRetries: 0}).models.list());
out.bad_field = await caught(() => client.chat.completions.create({
  model, messages, temperature: "hot"}));
out.models = (await client.models.list()).data.map((m) => m.id).sort();

// A stream the client abandons after two chunks: the server must stop its
// sequence (the C++ test checks the slot's counters).
{
  const stream = await client.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 3000, ignore_eos: true, stream: true,
  });
  let n = 0;
  for await (const chunk of stream) {
    if (++n === 2) break;  // leaving the loop aborts the request
  }
  out.cancelled = {chunks_read: n};
}

console.log(JSON.stringify(out));
