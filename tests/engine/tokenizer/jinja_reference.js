// Reference renderings of chat templates by @huggingface/jinja (the
// JavaScript port of Jinja that transformers.js uses), for
// jinja_reference_test.cc.
//
// Usage: node jinja_reference.js HF_JINJA_CJS CASES_JSONL
//
// Each input line is {"template": "...", "variables": {...}, "now_ms": N}.
// Prints one JSON object per line: {"text": "..."} or {"error": "..."}.
// strftime_now() sees the clock stopped at now_ms, in UTC, with English
// month names (what the C++ side is given).
'use strict';
const fs = require('fs');

process.env.TZ = 'UTC';
const [libPath, casesPath] = process.argv.slice(2);
if (!casesPath) {
  console.error('usage: node jinja_reference.js HF_JINJA_CJS CASES_JSONL');
  process.exit(2);
}

let now = 0;
const RealDate = Date;
global.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) {
      super(now);
    } else {
      super(...args);
    }
  }
  static now() {
    return now;
  }
};
const RealDateTimeFormat = Intl.DateTimeFormat;
Intl.DateTimeFormat = function(locale, options) {
  return new RealDateTimeFormat(locale === undefined ? 'en-US' : locale, options);
};

const {Template} = require(fs.realpathSync(libPath));

const lines = fs.readFileSync(casesPath, 'utf8').split('\n').filter((l) => l !== '');
const out = [];
for (const line of lines) {
  const c = JSON.parse(line);
  now = c.now_ms;
  try {
    out.push(JSON.stringify({text: new Template(c.template).render(c.variables)}));
  } catch (e) {
    out.push(JSON.stringify({error: String(e && e.message)}));
  }
}
process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
