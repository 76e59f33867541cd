// The independent judge of the structured-output tests: ajv (draft 2020-12,
// with ajv-formats), not minfer's grammar engine, says which JSON texts are
// valid against which schema.
//
//   node ajv_check.mjs NODE_MODULES labels SCHEMAS.jsonl
//     Checks the labels of a schema set in MaskBench's shape: every test's
//     "valid" must be what ajv says of its "data". Prints one JSON object:
//     {"schemas": N, "checked": N, "mislabeled": [{"schema", "name", "test",
//     "label", "ajv"}...], "uncompilable": [{"schema", "name", "error"}]}.
//   node ajv_check.mjs NODE_MODULES outputs CASES.json
//     CASES.json: {"schemas": [schema, ...], "outputs": [{"schema": i,
//     "text": "..."}, ...]}. Prints a JSON array with one entry per output:
//     {"json": parsed?, "valid": valid?, "error": "..."}.
// Exit code 0 whenever the judging itself ran (the verdicts are the
// output), 2 on bad arguments.
import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";

const [modules, mode, file] = process.argv.slice(2);
if (!modules || !mode || !file) {
  console.error("usage: node ajv_check.mjs NODE_MODULES (labels|outputs) FILE");
  process.exit(2);
}
const require = createRequire(path.resolve(modules, "noop.js"));
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

// strict: false — annotations and unknown keywords in real-world schemas
// are not errors; the schemas here are judged, not linted.
function makeAjv() {
  const ajv = new Ajv2020({strict: false, allErrors: false, validateFormats: true});
  addFormats(ajv);
  return ajv;
}

function compile(ajv, schema) {
  try {
    return {validate: ajv.compile(schema)};
  } catch (e) {
    return {error: String(e && e.message || e)};
  }
}

function errorText(validate) {
  const e = validate.errors && validate.errors[0];
  return e ? `${e.instancePath || "/"} ${e.message}` : "";
}

if (mode === "labels") {
  const lines = fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "");
  const out = {schemas: 0, checked: 0, mislabeled: [], uncompilable: []};
  lines.forEach((line, i) => {
    const rec = JSON.parse(line);
    out.schemas++;
    // A fresh instance per schema: $id clashes between schemas can not
    // leak from one to the next.
    const c = compile(makeAjv(), rec.schema);
    if (c.error) {
      out.uncompilable.push({schema: i, name: rec.name, error: c.error});
      return;
    }
    (rec.tests || []).forEach((t, j) => {
      out.checked++;
      const ok = c.validate(t.data);
      if (ok !== t.valid) {
        out.mislabeled.push({schema: i, name: rec.name, test: j, label: t.valid, ajv: ok,
                             error: errorText(c.validate)});
      }
    });
  });
  console.log(JSON.stringify(out));
} else if (mode === "outputs") {
  const cases = JSON.parse(fs.readFileSync(file, "utf8"));
  const validators = cases.schemas.map((s) => compile(makeAjv(), s));
  const out = cases.outputs.map((o) => {
    let data;
    try {
      data = JSON.parse(o.text);
    } catch (e) {
      return {json: false, valid: false, error: `not JSON: ${e.message}`};
    }
    const c = validators[o.schema];
    if (c.error) return {json: true, valid: false, error: `schema: ${c.error}`};
    const ok = c.validate(data);
    return {json: true, valid: ok, error: ok ? "" : errorText(c.validate)};
  });
  console.log(JSON.stringify(out));
} else {
  console.error(`unknown mode '${mode}'`);
  process.exit(2);
}
