// Parses a GGUF file with @huggingface/gguf (an independent implementation)
// and prints a canonical JSON summary: every metadata key with its value
// (arrays as length + FNV-1a hash of their JSON), every tensor's name, shape,
// ggml type and data offset, and the data section's offset.
// Usage: node gguf_js_dump.js NPM_DIR FILE
const path = require('path');
const { gguf } = require(path.resolve(process.argv[2], '@huggingface/gguf'));

function fnv1a(str) {
  let h = 0x811c9dc5;
  const bytes = Buffer.from(str, 'utf8');
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16);
}

function canon(v) {
  if (typeof v === 'bigint') return v.toString();
  if (Array.isArray(v)) return { len: v.length, hash: fnv1a(JSON.stringify(v.map(canon))) };
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toPrecision(7);
  return v;
}

(async () => {
  const r = await gguf(process.argv[3], { allowLocalFile: true });
  const meta = {};
  for (const [k, v] of Object.entries(r.metadata)) {
    if (k === 'version' || k === 'tensor_count' || k === 'kv_count') continue;
    meta[k] = canon(v);
  }
  const tensors = r.tensorInfos.map((t) => ({
    name: t.name,
    shape: t.shape.map((d) => d.toString()),
    type: t.dtype,
    offset: t.offset.toString(),
  }));
  console.log(JSON.stringify({
    version: Number(r.metadata.version),
    data_offset: r.tensorDataOffset.toString(),
    metadata: meta,
    tensors,
  }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
