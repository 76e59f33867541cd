// The reference side of llama_cpp_test's tokenizer case: loads only the
// vocabulary of a GGUF with llama.cpp (through node-llama-cpp) and prints,
// as one JSON array, llama.cpp's token ids (no special-token parsing) for
// each line of a JSONL file of strings, after NFC normalization when NORM is
// "nfc": Qwen2's tokenizer normalizes to NFC, llama.cpp's does not (it would
// split NFD accents differently), so the reference gets the normalized
// text; Llama 3's has no normalizer ("raw").
//
//   node llama_cpp_tokenize.mjs NODE_MODULES MODEL CORPUS.jsonl [nfc|raw]
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, corpus, norm = "nfc"] = process.argv.slice(2);
const entry = path.resolve(modules, "node-llama-cpp", "dist", "index.js");
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(entry).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0, vocabOnly: true});
const out = [];
for (const line of fs.readFileSync(corpus, "utf8").split("\n")) {
  if (line.trim() === "") continue;
  const raw = JSON.parse(line);
  const text = norm === "nfc" ? raw.normalize("NFC") : raw;
  out.push(Array.from(model.tokenize(text, false)));
}
console.log(JSON.stringify(out));
await model.dispose();
await llama.dispose();
