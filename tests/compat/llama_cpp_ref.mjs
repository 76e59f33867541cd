// The reference side of llama_cpp_test: loads a GGUF with llama.cpp (the
// prebuilt CPU build that the npm package node-llama-cpp ships) and prints,
// as one JSON object, llama.cpp's token ids for each prompt (BOS first when
// the model asks for it, as llama.cpp's own tokenization with add_special
// does), its greedy continuation of `n` tokens, and at each step of it the
// `k` most likely next tokens with their log-probabilities (the softmax of
// the raw logits: greedy sampling leaves them unchanged).
//
//   node llama_cpp_ref.mjs NODE_MODULES MODEL N K PROMPT...
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, nArg, kArg, ...prompts] = process.argv.slice(2);
const entry = path.resolve(modules, "node-llama-cpp", "dist", "index.js");
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(entry).href);

// build: "never": use the prebuilt binary or fail (no network, no compiler).
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({contextSize: 256, threads: 2});
const bos = model.tokens.shouldPrependBosToken && model.tokens.bos != null ? [model.tokens.bos] : [];
const out = {add_bos: bos.length > 0, prompts: []};
for (const text of prompts) {
  const ids = bos.concat(Array.from(model.tokenize(text, false)));
  const sequence = context.getSequence();
  const greedy = [];
  const top = [];
  const steps = sequence.evaluateWithMetadata(ids, {probabilities: true}, {temperature: 0});
  for await (const step of steps) {
    greedy.push(step.token);
    const best = [];
    for (const [token, p] of step.probabilities) {
      if (best.length >= Number(kArg)) break;
      best.push([token, Math.log(p)]);
    }
    top.push(best);
    if (greedy.length >= Number(nArg)) break;
  }
  sequence.dispose();
  out.prompts.push({text, ids, greedy, top});
}
console.log(JSON.stringify(out));
await context.dispose();
await model.dispose();
await llama.dispose();
