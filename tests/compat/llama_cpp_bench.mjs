// llama.cpp's CPU speed on a GGUF file, for docs/benchmarks.md's side-by-side
// figures: the prebuilt CPU build that the npm package node-llama-cpp ships
// (the same one tests/compat/llama_cpp_test uses as the oracle), at a fixed
// thread count. Measures, like `llama-bench` and `minfer bench`:
//   pp: one prompt of P tokens evaluated from an empty context,
//   tg: N single-token decode steps after a short prompt (see tg() for the
//       binding's per-step overhead),
// each repeated R times after one warm-up; prints mean and stddev in t/s.
//
//   node tests/compat/llama_cpp_bench.mjs NODE_MODULES MODEL [P N R THREADS]
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, pArg = "512", nArg = "128", rArg = "3", tArg = "2"] =
    process.argv.slice(2);
const [P, N, R, T] = [pArg, nArg, rArg, tArg].map(Number);
const entry = path.resolve(modules, "node-llama-cpp", "dist", "index.js");
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(entry).href);

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({contextSize: Math.max(P, N + 16) + 16, threads: T,
                                           batchSize: Math.max(P, 512)});
// Ordinary token ids from the middle of the vocabulary (a synthetic model's
// text does not matter, only the work).
const ids = Array.from({length: Math.max(P, 8)}, (_, i) => 1000 + (i * 37) % 500);

async function pp() {
  const seq = context.getSequence();
  const t0 = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, P));
  const dt = (performance.now() - t0) / 1000;
  seq.dispose();
  return P / dt;
}

async function tg() {
  const seq = context.getSequence();
  await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, 8));
  // One decode step per call: each evaluates one token at the next
  // position, as a generation step does, without the sampler. Each call
  // also pays the binding's round trip to its worker thread: ~7 ms on the
  // 2-vCPU dev VM (a 14M-parameter model decodes at ~130 t/s), so only
  // models whose step takes far longer compare llama.cpp's kernels.
  const t0 = performance.now();
  for (let i = 0; i < N; ++i) await seq.evaluateWithoutGeneratingNewTokens([ids[8 + (i % 100)] ?? 1000 + i]);
  const dt = (performance.now() - t0) / 1000;
  seq.dispose();
  return N / dt;
}

function stats(xs) {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const sd = Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, xs.length - 1));
  return `${mean.toFixed(1)} ± ${sd.toFixed(1)}`;
}

const out = {};
for (const [name, fn, on] of [[`pp${P}`, pp, P > 0], [`tg${N}`, tg, N > 0]]) {
  if (!on) continue;
  await fn();  // warm-up
  const xs = [];
  for (let r = 0; r < R; ++r) xs.push(await fn());
  out[name] = stats(xs);
}
console.log(`llama.cpp (node-llama-cpp, ${T} threads) ${path.basename(modelPath)}: ` +
            Object.entries(out).map(([k, v]) => `${k} ${v} t/s`).join(", "));
await context.dispose();
await model.dispose();
await llama.dispose();
