// The independent reference of regex_test: JavaScript's own RegExp decides
// which strings a pattern matches.
//
//   node regex_reference.mjs CASES.json
//
// CASES.json: [{"pattern": P, "flags": "u" | "", "mode": "full" | "search",
// "inputs": [S, ...]}, ...]. "full" tests new RegExp('^(?:' + P + ')$',
// flags) (the whole string must match, as RegexToGrammar means);
// "search" tests new RegExp(P, flags) unanchored (JSON Schema's `pattern`).
// Prints one JSON array: per case, an array of booleans, or {"error": msg}
// where RegExp refuses the pattern.
import fs from "node:fs";

const cases = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = cases.map((c) => {
  let re;
  try {
    re = c.mode === "full" ? new RegExp(`^(?:${c.pattern})$`, c.flags)
                           : new RegExp(c.pattern, c.flags);
  } catch (e) {
    return {error: String(e)};
  }
  return c.inputs.map((s) => re.test(s));
});
process.stdout.write(JSON.stringify(out));
