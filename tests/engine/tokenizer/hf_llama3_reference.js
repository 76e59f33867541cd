// Reference token ids of Llama 3's (and gpt-oss's o200k_harmony) tokenizer
// from Hugging Face's JavaScript tokenizer (@huggingface/tokenizers), for
// hf_llama3_reference_test.cc.
//
// Usage: node hf_llama3_reference.js HF_TOKENIZERS_CJS TOKENIZER_JSON INPUT_JSONL
//
// Each input line is a JSON string, or {"hex": "..."} for raw bytes (decoded
// as a WHATWG TextDecoder does). Prints one JSON object per input line:
//   {"special": [ids], "plain": [ids], "decoded": "..."}
// "special": encode(text) as transformers does by default: every added token
// recognized in the text, and the post-processor's <|begin_of_text|> first.
// "plain": no added token recognized (all of Llama 3's are special) and no
// BOS — minfer's parse_special = false, add_bos = false. "decoded": the
// reference decode of the "special" ids.
'use strict';
const fs = require('fs');

const [libPath, tokenizerPath, inputPath] = process.argv.slice(2);
if (!inputPath) {
  console.error('usage: node hf_llama3_reference.js HF_TOKENIZERS_CJS TOKENIZER_JSON INPUT_JSONL');
  process.exit(2);
}
const {Tokenizer} = require(fs.realpathSync(libPath));

function load(keepAdded) {
  const json = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
  json.added_tokens = json.added_tokens.filter(keepAdded);
  return new Tokenizer(json, {});
}
const full = load(() => true);
const plain = load((t) => !t.special);

const decoder = new TextDecoder('utf-8', {fatal: false, ignoreBOM: true});
const lines = fs.readFileSync(inputPath, 'utf8').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
const out = [];
for (const line of lines) {
  const v = JSON.parse(line);
  const text = typeof v === 'string' ? v : decoder.decode(Buffer.from(v.hex, 'hex'));
  const special = full.encode(text).ids;
  const plainIds = plain.encode(text, {add_special_tokens: false}).ids;
  // (decode refuses an empty list: an empty text without a BOS, gpt-oss's)
  const decoded = special.length === 0 ? '' :
      full.decode(special, {skip_special_tokens: false, clean_up_tokenization_spaces: false});
  out.push(JSON.stringify({special, plain: plainIds, decoded}));
}
process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
