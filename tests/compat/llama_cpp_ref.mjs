// The reference side of llama_cpp_test: loads a GGUF with llama.cpp (the
// prebuilt CPU build that the npm package node-llama-cpp ships) and prints,
// as one JSON object, llama.cpp's token ids for each prompt and its greedy
// continuation of `n` tokens.
//
//   node llama_cpp_ref.mjs NODE_MODULES MODEL N PROMPT...
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, nArg, ...prompts] = process.argv.slice(2);
const entry = path.resolve(modules, "node-llama-cpp", "dist", "index.js");
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(entry).href);

// build: "never": use the prebuilt binary or fail (no network, no compiler).
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({contextSize: 256, threads: 2});
const out = {prompts: []};
for (const text of prompts) {
  const ids = Array.from(model.tokenize(text, false));
  const sequence = context.getSequence();
  const greedy = [];
  for await (const t of sequence.evaluate(ids, {temperature: 0})) {
    greedy.push(t);
    if (greedy.length >= Number(nArg)) break;
  }
  sequence.dispose();
  out.prompts.push({text, ids, greedy});
}
console.log(JSON.stringify(out));
await context.dispose();
await model.dispose();
await llama.dispose();
