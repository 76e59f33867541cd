// Encode throughput of @huggingface/tokenizers on a text file (see
// tokenizer_bench.sh). usage: node bench_hf.js HF_TOKENIZERS_CJS TOKENIZER_JSON VOCAB_LIMIT TEXT RUNS
'use strict';
const fs = require('fs');
const [libPath, tokenizerPath, vocabLimitArg, textPath, runsArg] = process.argv.slice(2);
const {Tokenizer} = require(fs.realpathSync(libPath));
const json = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
json.added_tokens = json.added_tokens.filter((t) => t.id < Number(vocabLimitArg));
const tok = new Tokenizer(json, {});
const text = fs.readFileSync(textPath, 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');
const runs = Number(runsArg || 5);
let first = 0, best = Infinity, ids = [];
for (let r = 0; r < runs; ++r) {
  const start = process.hrtime.bigint();
  ids = tok.encode(text).ids;
  const secs = Number(process.hrtime.bigint() - start) / 1e9;
  if (r === 0) first = secs;
  best = Math.min(best, secs);
}
let h = 2166136261;
for (const id of ids) {
  h ^= id;
  h = Math.imul(h, 16777619) >>> 0;
}
console.log(JSON.stringify({impl: '@huggingface/tokenizers ' + require(fs.realpathSync(
    libPath.replace(/dist\/[^/]*$/, 'package.json'))).version, bytes, tokens: ids.length, hash: h,
    first_mb_s: +(bytes / first / 1e6).toFixed(2), best_mb_s: +(bytes / best / 1e6).toFixed(2)}));
