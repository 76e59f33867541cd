// The independent judge of json_schema_test: ajv (draft 2020-12, with
// ajv-formats) validates every instance text of every case and prints the
// verdicts as JSON, [[true, false, ...], ...] in the input's order. A text
// that JSON.parse rejects is invalid.
//
//   node json_schema_ajv.mjs NODE_MODULES INPUT.json
//
// INPUT: [{"schema": ..., "texts": ["...", ...]}, ...]
import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";

const [modules, input] = process.argv.slice(2);
const require = createRequire(path.resolve(modules) + path.sep);
const Ajv2020 = require("ajv/dist/2020").default;
const addFormatsModule = require("ajv-formats");
const addFormats = addFormatsModule.default ?? addFormatsModule;

const cases = JSON.parse(fs.readFileSync(input, "utf8"));
const verdicts = cases.map((c) => {
  // strict: false — unknown keywords (definitions) are left alone, as the
  // compiler under test treats them; formats are validated.
  const ajv = new Ajv2020({strict: false, validateFormats: true});
  addFormats(ajv);
  const validate = ajv.compile(c.schema);
  return c.texts.map((t) => {
    let value;
    try {
      value = JSON.parse(t);
    } catch {
      return false;
    }
    return validate(value) === true;
  });
});
process.stdout.write(JSON.stringify(verdicts));
