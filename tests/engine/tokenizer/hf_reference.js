// Reference token ids from Hugging Face's JavaScript tokenizer
// (@huggingface/tokenizers), for hf_reference_test.cc.
//
// Usage: node hf_reference.js HF_TOKENIZERS_CJS TOKENIZER_JSON VOCAB_LIMIT INPUT_JSONL
//
// Each input line is a JSON string, or {"hex": "..."} for raw bytes (decoded
// the way a WHATWG TextDecoder does: each ill-formed subpart becomes U+FFFD,
// a leading BOM kept). Prints one JSON object per input line:
//   {"special": [ids], "nospecial": [ids], "nfc": "...", "decoded": "..."}
// "special" recognizes every added token; "nospecial" only added tokens that
// are not control tokens (not flagged special and not shaped "<|...|>": the
// rule minfer's tokenizer.json loader and llama.cpp's converter use), which
// is what minfer's parse_special=false means. "decoded" is the reference
// decode of the "special" ids.
'use strict';
const fs = require('fs');

const [libPath, tokenizerPath, vocabLimitArg, inputPath] = process.argv.slice(2);
if (!inputPath) {
  console.error('usage: node hf_reference.js HF_TOKENIZERS_CJS TOKENIZER_JSON VOCAB_LIMIT INPUT_JSONL');
  process.exit(2);
}
const {Tokenizer} = require(fs.realpathSync(libPath));
const vocabLimit = Number(vocabLimitArg);

const looksSpecial = (c) =>
    (c.length >= 4 && c.startsWith('<|') && c.endsWith('|>')) ||
    (c.startsWith('<\uFF5C') && c.endsWith('\uFF5C>'));

function load(keepAdded) {
  const json = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
  if (vocabLimit >= 0) {
    json.added_tokens = json.added_tokens.filter((t) => t.id < vocabLimit);
  }
  json.added_tokens = json.added_tokens.filter(keepAdded);
  return new Tokenizer(json, {});
}

const withSpecial = load(() => true);
const withoutSpecial = load((t) => !(t.special || looksSpecial(t.content)));

const decoder = new TextDecoder('utf-8', {fatal: false, ignoreBOM: true});
const lines = fs.readFileSync(inputPath, 'utf8').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
const out = [];
for (const line of lines) {
  const v = JSON.parse(line);
  const text = typeof v === 'string' ? v : decoder.decode(Buffer.from(v.hex, 'hex'));
  const special = withSpecial.encode(text).ids;
  const nospecial = withoutSpecial.encode(text).ids;
  const decoded = special.length === 0 ? '' :
      withSpecial.decode(special, {skip_special_tokens: false, clean_up_tokenization_spaces: false});
  out.push(JSON.stringify({special, nospecial, nfc: text.normalize('NFC'), decoded}));
}
process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
