// Unit tests of the Jinja interpreter (engine/tokenizer/jinja.h) on small
// templates. Every expected output was checked by hand against Python
// Jinja2 3.1 configured as transformers configures it (trim_blocks,
// lstrip_blocks, loopcontrols, an immutable sandbox).
#include "engine/tokenizer/jinja.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace minfer::tokenizer::jinja {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The rendering, or "ERROR <code>: <message>".
std::string R(const std::string& source, const Variables& vars = {},
              const RenderOptions& options = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) {
    return absl::StrCat("ERROR ", absl::StatusCodeToString(t.status().code()), ": ",
                        t.status().message());
  }
  auto r = t->Render(vars, options);
  if (!r.ok()) {
    return absl::StrCat("ERROR ", absl::StatusCodeToString(r.status().code()), ": ",
                        r.status().message());
  }
  return r->text;
}

Variables Vars(const std::string& json) {
  auto v = Value::FromJson(json);
  EXPECT_TRUE(v.ok()) << v.status();
  Variables out;
  for (const auto& [k, x] : v->dict_items()) out[k] = x;
  return out;
}

// --- Text and whitespace ------------------------------------------------------

TEST(JinjaTest, PlainTextAndTrailingNewline) {
  EXPECT_EQ(R(""), "");
  EXPECT_EQ(R("hello"), "hello");
  EXPECT_EQ(R("a\n"), "a");  // one trailing newline is dropped
  EXPECT_EQ(R("a\n\n"), "a\n");
  EXPECT_EQ(R("a\r\nb\rc"), "a\nb\nc");  // newlines normalized
  EXPECT_EQ(R("{ not a tag }"), "{ not a tag }");
}

TEST(JinjaTest, TrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the
  // indentation before one. Expression tags are left alone.
  EXPECT_EQ(R("  {% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(R("x {% if true %}y{% endif %}"), "x y");  // not at line start
  EXPECT_EQ(R("  {{ 1 }}\n  {{ 2 }}"), "  1\n  2");
  EXPECT_EQ(R("  {# note #}\nz"), "z");
  EXPECT_EQ(R("{% for x in [1, 2] %}\n{{ x }}\n{% endfor %}\n"), "1\n2\n");
}

TEST(JinjaTest, WhitespaceControl) {
  EXPECT_EQ(R("a  \n  {%- if true -%}  \n  b  \n  {%- endif %}\nc"), "abc");
  EXPECT_EQ(R("a  \n  {%- if true %}  \n  b  \n  {% endif -%}\n  c"), "a  \n  b  \nc");
  EXPECT_EQ(R("a \n {{- 1 -}} \n b"), "a1b");
  EXPECT_EQ(R("a \n {#- c -#} \n b"), "ab");
  // "+" keeps the indentation lstrip_blocks would drop.
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}"), "  x");
  // Unicode whitespace counts (Python's str.isspace()).
  EXPECT_EQ(R("a\u00a0\u3000{{- 'b' }}"), "ab");
}

TEST(JinjaTest, CommentsAndRaw) {
  EXPECT_EQ(R("a{# {{ ignored }} #}b"), "ab");
  EXPECT_EQ(R("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(R("{% raw -%}  {{ y }}  {%- endraw %}"), "{{ y }}");
}

// --- Literals and operators ---------------------------------------------------------

TEST(JinjaTest, Literals) {
  EXPECT_EQ(R("{{ 'a' \"b\" }}"), "ab");
  EXPECT_EQ(R(R"({{ 'a\tb\u00e9\x41\101\q\n' }})"), "a\tb\u00e9AA\\q\n");
  EXPECT_EQ(R("{{ 42 }} {{ -7 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }}"),
            "42 -7 31 15 5 1000");
  EXPECT_EQ(R("{{ 1.5 }} {{ 1e3 }} {{ 2.0 }} {{ 1.5e-5 }} {{ 1e16 }} {{ 0.1 + 0.2 }}"),
            "1.5 1000.0 2.0 1.5e-05 1e+16 0.30000000000000004");
  EXPECT_EQ(R("{{ true }} {{ False }} {{ none }} {{ None }}"), "True False None None");
  EXPECT_EQ(R("{{ [1, 'a', none, [true]] }} {{ (1,) }} {{ (1, 2) }} {{ () }}"),
            "[1, 'a', None, [True]] (1,) (1, 2) ()");
  EXPECT_EQ(R("{{ {'a': 1, 'b': 'x'} }} {{ {} }}"), "{'a': 1, 'b': 'x'} {}");
  EXPECT_EQ(R(R"({{ ["it's", 'say "hi"', 'tab\there', 'é', '\x01'] }})"),
            R"(["it's", 'say "hi"', 'tab\there', 'é', '\x01'])");
}

TEST(JinjaTest, Arithmetic) {
  EXPECT_EQ(R("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} "
              "{{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}"),
            "7 9 3 -4 1 2 3.5 2.0");
  EXPECT_EQ(R("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 1 + 2.5 }} {{ 1 + true }}"),
            "1024 0.5 4 3.5 2");
  EXPECT_EQ(R("{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] + [2] }} {{ [0] * 3 }}"),
            "abcd ababab xx [1, 2] [0, 0, 0]");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ none ~ true ~ undefined_thing }}"), "a1NoneTrue");
  EXPECT_THAT(R("{{ 1 / 0 }}"), HasSubstr("division by zero"));
  EXPECT_THAT(R("{{ 'a' + 1 }}"), HasSubstr("unsupported operand type(s) for +: 'str' and 'int'"));
  EXPECT_THAT(R("{{ 9223372036854775807 + 1 }}"), HasSubstr("integer overflow"));
}

TEST(JinjaTest, ComparisonsAndLogic) {
  EXPECT_EQ(R("{{ 1 == 1.0 }} {{ true == 1 }} {{ '1' == 1 }} {{ [1, 2] == [1, 2] }} "
              "{{ (1, 2) == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}"),
            "True True False True False True");
  EXPECT_EQ(R("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }}"),
            "True False True True");
  EXPECT_EQ(R("{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 0} }} "
              "{{ 'x' in missing }}"),
            "True True True True False");
  EXPECT_EQ(R("{{ 0 or '' or 'z' }} {{ 1 and 0 }} {{ not 0 }} {{ not 'a' in 'abc' }}"),
            "z 0 True False");
  EXPECT_EQ(
      R("{{ 'y' if 1 > 2 else 'n' }} [{{ 'y' if false }}] {{ 1 if false else 2 if false else 3 }}"),
      "n [] 3");
  EXPECT_THAT(R("{{ 1 < 'a' }}"),
              HasSubstr("'<' not supported between instances of 'int' and 'str'"));
}

// --- Variables, attributes, items ---------------------------------------------------

TEST(JinjaTest, AttributesItemsAndSlices) {
  const Variables v = Vars(R"({"m": {"role": "user", "items": 5, "list": [10, 20, 30]},
                              "s": "héllo"})");
  EXPECT_EQ(R("{{ m.role }} {{ m['role'] }} {{ m.list[1] }} {{ m.list[-1] }} {{ m.list.0 }}", v),
            "user user 20 30 10");
  // An attribute prefers dict methods, an item the key (Jinja2's getattr /
  // getitem).
  EXPECT_EQ(R("{{ m['items'] }} {{ m.items is callable }}", v), "5 True");
  EXPECT_EQ(R("{{ m.list[1:] }} {{ m.list[::-1] }} {{ m.list[::2] }} {{ m.list[-2:] }} "
              "{{ m.list[5:] }}",
              v),
            "[20, 30] [30, 20, 10] [10, 30] [20, 30] []");
  EXPECT_EQ(R("{{ s|length }} {{ s[1] }} {{ s[::-1] }} {{ s[1:3] }}", v), "5 é olléh él");
  // Missing things are undefined: they print as nothing and test false ...
  EXPECT_EQ(R("[{{ m.nope }}][{{ m.list[7] }}][{{ nope }}] {{ m.nope is defined }}", v),
            "[][][] False");
  EXPECT_EQ(R("{{ none.x is defined }}"), "False");
  // ... but using one further is an error, as in Python Jinja2.
  EXPECT_THAT(R("{{ nope.x }}"), HasSubstr("'nope' is undefined"));
  EXPECT_THAT(R("{{ m.list[7].x }}", v), HasSubstr("'list' object has no element 7"));
  EXPECT_THAT(R("{{ nope + 1 }}"), HasSubstr("'nope' is undefined"));
  EXPECT_THAT(R("{{ m.list.append(1) }}", v), HasSubstr("unsafe"));
}

TEST(JinjaTest, UndefinedBehavesLikeJinja2) {
  EXPECT_EQ(R("{{ u|length }}|{{ u|trim }}|{{ u|list }}|{{ u|first }}|{{ u|string }}|"
              "{{ u|default('d') }}|{{ u is iterable }}|{{ u == u }}"),
            "0||[]|||d|True|True");
  EXPECT_EQ(R("{% for x in u %}a{% else %}empty{% endfor %}"), "empty");
}

// --- Statements -----------------------------------------------------------------------

TEST(JinjaTest, IfElifElse) {
  const std::string t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(R(t, Vars(R"({"x": 1})")), "one");
  EXPECT_EQ(R(t, Vars(R"({"x": 2})")), "two");
  EXPECT_EQ(R(t, Vars(R"({"x": 3})")), "many");
}

TEST(JinjaTest, ForLoops) {
  EXPECT_EQ(R("{% for x in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}"
              "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ x }};{% endfor %}"),
            "013TrueFalse3a;122FalseFalse3b;231FalseTrue3c;");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}"),
            "-2 1-3 2- ");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% "
              "endfor %}",
              Vars(R"({"d": {"b": 1, "a": 2}})")),
            "b=1;a=2;ba");
  EXPECT_EQ(R("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }} {% endfor %}"), "3 7 ");
  EXPECT_EQ(R("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(
      R("{% for x in [1, 2, 3] if x != 2 %}{{ loop.index }}:{{ x }}{{ loop.cycle('a', 'b') }} "
        "{% endfor %}"),
      "1:1a 2:3b ");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(R("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}"
              "{% if x == 3 %}{% break %}{% endif %}{% endfor %}"),
            "13");
  EXPECT_EQ(R("{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}"
              "{{ loop.index }}|{% endfor %}"),
            "11a 21b 1|12a 22b 2|");
  EXPECT_THAT(R("{% for a, b in [[1]] %}{% endfor %}"), HasSubstr("not enough values to unpack"));
  EXPECT_THAT(R("{% for x in 5 %}{% endfor %}"), HasSubstr("'int' object is not iterable"));
}

TEST(JinjaTest, SetAndScoping) {
  EXPECT_EQ(R("{% set x = 1 %}{% set y = x + 1 %}{{ x }}{{ y }}"), "12");
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }}"), "12 (1, 2)");
  // A set inside a loop is local to its iteration (hence namespace()).
  EXPECT_EQ(
      R("{% set x = 0 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{{ x }}{% endfor %}{{ x }}"),
      "[0]1[0]20");
  EXPECT_EQ(R("{% set ns = namespace(total=0, found=false) %}{% for i in [1, 2, 3] %}"
              "{% set ns.total = ns.total + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}"
              "{% endfor %}{{ ns.total }} {{ ns.found }} {{ ns }}"),
            "6 True <Namespace {'total': 6, 'found': True}>");
  EXPECT_EQ(
      R("{% set x %}a{{ 1 + 1 }}b{% endset %}{{ x }}|{% set y | upper %}q{% endset %}{{ y }}"),
      "a2b|Q");
  EXPECT_EQ(R("{% with a = 5, b = 6 %}{{ a + b }}{% endwith %}[{{ a }}]"), "11[]");
  EXPECT_THAT(R("{% set x = 1 %}{% set x.y = 2 %}"), HasSubstr("not a namespace"));
}

TEST(JinjaTest, MacrosFilterBlocksAndGeneration) {
  EXPECT_EQ(R("{% macro f(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}"
              "{{ f(a=3) }}{{ f() }}"),
            "[1d][12][3d][d]");
  EXPECT_EQ(R("{% macro outer(x) %}<{{ inner(x) }}>{% endmacro %}"
              "{% macro inner(y) %}{{ y | upper }}{% endmacro %}{{ outer('a') }}"),
            "<A>");
  EXPECT_THAT(R("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}"), HasSubstr("takes not more than 1"));
  EXPECT_THAT(R("{% macro f(a) %}{% endmacro %}{{ f(b=2) }}"),
              HasSubstr("no keyword argument 'b'"));
  EXPECT_EQ(R("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(R("{% generation %}answer{% endgeneration %}"), "answer");
}

// --- Filters --------------------------------------------------------------------------

TEST(JinjaTest, StringFilters) {
  EXPECT_EQ(R("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'aBc'|upper }}|{{ 'aBc'|lower }}|"
              "{{ 'hELLO wORLD'|capitalize }}|{{ 'hello world'|title }}"),
            "a b|a|ABC|abc|Hello world|Hello World");
  EXPECT_EQ(R("{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ "
              "'ab'|replace('', '.') }}"),
            "a+b+c bba .a.b.");
  EXPECT_EQ(R("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(1, "
              "blank=true) }}"),
            "a\n  b\n\n  c|  a\n  b|a\n \n b");
  EXPECT_EQ(R("{{ 'straße'|upper }} {{ 'ÀÉ'|lower }}"), "STRASSE àé");
  EXPECT_EQ(R("{{ 'one two  three'|wordcount }} {{ 5|string }}{{ none|string }}"), "3 5None");
}

TEST(JinjaTest, SequenceFilters) {
  EXPECT_EQ(R("{{ [1, 2, 3]|length }} {{ 'abc'|count }} {{ {'a': 1}|length }}"), "3 3 1");
  EXPECT_EQ(R("{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }}"),
            "1 3 a c");
  EXPECT_EQ(R("{{ [1, 2, 3]|join(', ') }} {{ 'abc'|join('.') }} {{ [{'n': 'x'}, {'n': "
              "'y'}]|join('|', attribute='n') }}"),
            "1, 2, 3 a.b.c x|y");
  EXPECT_EQ(
      R("{{ 'ab'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }} {{ {'a': 1}|items|list }}"),
      "['a', 'b'] ['a', 'b'] [1, 2] [('a', 1)]");
  EXPECT_EQ(R("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a']|sort }} {{ ['b', 'a']|sort(reverse=true) }} "
              "{{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }}"),
            "[1, 2, 3] ['A', 'a', 'b'] ['b', 'a'] [{'n': 1}, {'n': 2}]");
  EXPECT_EQ(R("{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2, 2, 1]|unique|list }} "
              "{{ ['a', 'A']|unique|list }}"),
            "[3, 2, 1] cba [1, 2] ['a']");
  EXPECT_EQ(R("{{ [1, 2, 3]|sum }} {{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} [{{ []|max }}]"),
            "6 3 1 []");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}"),
            "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)]");
}

TEST(JinjaTest, SelectionFilters) {
  EXPECT_EQ(
      R("{{ ['a', 'code_interpreter', 'b']|reject('equalto', 'code_interpreter')|join(', ') }}"),
      "a, b");
  EXPECT_EQ(R("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 0, 2]|select|list }} "
              "{{ [1, 2, 3]|reject('gt', 1)|list }}"),
            "[1, 3] [1, 2] [1]");
  EXPECT_EQ(R("{{ [{'a': 1}, {'a': 2}, {}]|selectattr('a')|list }} "
              "{{ [{'a': 1}, {'a': 2}]|selectattr('a', 'equalto', 2)|list }} "
              "{{ [{'a': 1}, {'b': 2}]|rejectattr('a')|list }}"),
            "[{'a': 1}, {'a': 2}] [{'a': 2}] [{'b': 2}]");
  EXPECT_EQ(
      R("{{ ['a', 'b']|map('upper')|list }} {{ [{'a': 'x'}, {'a': 'y'}]|map(attribute='a')|join }} "
        "{{ [{'a': 1}, {}]|map(attribute='a', default=0)|list }}"),
      "['A', 'B'] xy [1, 0]");
}

TEST(JinjaTest, ValueFilters) {
  EXPECT_EQ(
      R("{{ none|default('x') }} {{ ''|default('x', true) }} {{ u|default('y') }} {{ u|d('z') }} "
        "{{ 'v'|default('w') }}"),
      "None x y z v");
  EXPECT_EQ(
      R("{{ '12'|int }} {{ '1.9'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ ' 0x1F '|int(0, 16) }} "
        "{{ '2.5'|float }} {{ 'q'|float }} {{ 3|float }}"),
      "12 1 7 3 31 2.5 0.0 3.0");
  EXPECT_EQ(R("{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 5|round }} {{ 2.567|round(2) }} "
              "{{ 2.5|round(0, 'floor') }} {{ 2.1|round(0, 'ceil') }}"),
            "3 2.0 4.0 5 2.57 2.0 3.0");
  EXPECT_EQ(R("{{ 'x'|safe }}"), "x");
}

TEST(JinjaTest, Tojson) {
  EXPECT_EQ(R("{{ 'ab\"c'|tojson }} {{ [1, 2.0, none, true, 'é']|tojson }} {{ {'a': {}}|tojson }}"),
            R"("ab\"c" [1, 2.0, null, true, "é"] {"a": {}})");
  EXPECT_EQ(R("{{ {'a': [1, 2], 'b': []}|tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'é\n'|tojson(ensure_ascii=true) }} "
              "{{ '😀'|tojson(ensure_ascii=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }}"),
            R"({"a": 2, "b": 1} "\u00e9\n" "\ud83d\ude00" [1,2])");
  EXPECT_EQ(R("{{ {'x': 1}|tojson(indent=0) }}"), "{\n\"x\": 1\n}");
  EXPECT_THAT(R("{{ u|tojson }}"), HasSubstr("not JSON serializable"));
}

// --- Tests ------------------------------------------------------------------------------

TEST(JinjaTest, Tests) {
  EXPECT_EQ(R("{{ x is defined }} {{ u is defined }} {{ u is undefined }} {{ x is not defined }}",
              Vars(R"({"x": 1})")),
            "True False True False");
  EXPECT_EQ(R("{{ none is none }} {{ 0 is none }} {{ none is not none }}"), "True False False");
  EXPECT_EQ(R("{{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} "
              "{{ 'a' is iterable }} {{ [] is iterable }} {{ {} is iterable }} {{ 1 is iterable }} "
              "{{ 'a' is sequence }}"),
            "True False True False True True True False True");
  EXPECT_EQ(R("{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} "
              "{{ true is integer }} {{ 1.5 is float }} {{ true is boolean }} {{ false is false }} "
              "{{ 1 is true }}"),
            "True True True True False True True True False");
  EXPECT_EQ(R("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby(3) }} {{ 10 is divisibleby 3 }} "
              "{{ 2 is gt 1 }} {{ 2 is lt(1) }} {{ 1 is in [1] }} {{ 'a' is eq 'a' }} "
              "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ none is sameas none }}"),
            "True True True False True False True True True True True");
  EXPECT_EQ(R("{% macro m() %}{% endmacro %}{{ m is callable }} {{ 'x'.upper is callable }}"),
            "True True");
}

// --- Methods and globals ----------------------------------------------------------------

TEST(JinjaTest, StringMethods) {
  EXPECT_EQ(R("{{ '\n\n x \n'.strip('\n') }}|{{ '  x  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|"
              "{{ 'xxaxx'.rstrip('x') }}|{{ ' a '.lstrip() }}|{{ ' a '.rstrip() }}|"),
            " x |x|axx|xxa|a | a|");
  EXPECT_EQ(
      R("{{ '  a b  '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} "
        "{{ 'a b c'.rsplit(None, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a\nb\r\nc'.splitlines() "
        "}}"),
      "['a', 'b'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a b', 'c'] ['a,b', 'c'] ['a', 'b', 'c']");
  EXPECT_EQ(R("{{ 'abc'.startswith('ab') }} {{ 'abc'.startswith(('x', 'a')) }} "
              "{{ 'abc'.endswith('bc') }} {{ 'abc'.endswith('x') }}"),
            "True True True False");
  EXPECT_EQ(R("{{ 'aBc'.upper() }} {{ 'aBc'.lower() }} {{ 'hello world'.title() }} "
              "{{ 'hELLO'.capitalize() }} {{ 'a-b'.replace('-', '+') }}"),
            "ABC abc Hello World Hello a+b");
  EXPECT_EQ(R("{{ 'héllo'.find('l') }} {{ 'abc'.find('x') }} {{ 'hello'.rfind('l') }} "
              "{{ 'abab'.count('ab') }} {{ '-'.join(['a', 'b']) }}"),
            "2 -1 3 2 a-b");
  EXPECT_THAT(R("{{ 'a'.split('') }}"), HasSubstr("empty separator"));
  EXPECT_THAT(R("{{ 'x'.nosuch() }}"), HasSubstr("'str' object has no attribute 'nosuch'"));
}

TEST(JinjaTest, DictMethods) {
  const Variables v = Vars(R"({"d": {"a": 1, "b": [2]}})");
  EXPECT_EQ(R("{{ d.get('a') }} {{ d.get('x') }} {{ d.get('x', 3) }} {{ d.keys()|list }} "
              "{{ d.values()|list }} {{ d.items()|list }}",
              v),
            "1 None 3 ['a', 'b'] [1, [2]] [('a', 1), ('b', [2])]");
}

TEST(JinjaTest, Globals) {
  EXPECT_EQ(R("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} "
              "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ namespace({'k': 2}).k }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': 'x'} 1 2");
  EXPECT_THAT(R("{{ range(100001)|length }}"), HasSubstr("range() of more than 100000 items"));
  RenderOptions o;
  o.now = absl::FromCivil(absl::CivilSecond(2024, 7, 26, 13, 5, 0), absl::UTCTimeZone());
  o.time_zone = absl::UTCTimeZone();
  EXPECT_EQ(R("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ "
              "strftime_now('%B') }}",
              {}, o),
            "26 Jul 2024|2024-07-26 13:05|July");
  // A variable shadows a global.
  EXPECT_EQ(R("{{ range }}", Vars(R"({"range": "mine"})")), "mine");
}

TEST(JinjaTest, RaiseException) {
  auto t = Template::Parse(
      "{% if x %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}ok");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->Render({})->text, "ok");
  auto r = t->Render(Vars(R"({"x": true})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Conversation roles must alternate");
}

// The constructs of Llama 3.1's tool calling (builtin tools, "| items",
// tojson(indent=4), "is mapping or is iterable"), in a template written
// for this test. (@huggingface/jinja 0.5 has no "reject" filter.)
TEST(JinjaTest, LlamaToolCallConstructs) {
  const std::string t = R"JINJA({%- set builtin_tools = ['brave_search', 'code_interpreter', 'wolfram_alpha'] %}
{{- "Environment: ipython\n" }}
{{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n" }}
{%- for message in messages %}
    {%- if 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
            {%- endfor %}
            {{- ")" }}
        {%- else %}
            {{- '{"name": "' + tool_call.name + '", "parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {{- "<|eom_id|>" }}
    {%- elif message.role == "tool" %}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
    {%- else %}
        {{- message.role + ': ' + message['content'] | trim + '\n' }}
    {%- endif %}
{%- endfor %}
{{- {'name': 'f', 'parameters': {'a': [1, 2], 'b': {}}} | tojson(indent=4) }})JINJA";
  const Variables v = Vars(R"JSON({"messages": [{"role": "user", "content": "  weather?  "}, {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "weather in Paris", "count": "3"}}}]}, {"role": "tool", "content": {"temp": 21}}, {"role": "assistant", "tool_calls": [{"function": {"name": "get_time", "arguments": {"tz": "UTC"}}}]}, {"role": "tool", "content": "12:00"}]})JSON");
  EXPECT_EQ(R(t, v),
            "Environment: ipython\nTools: brave_search, wolfram_alpha\n\nuser: weather?\n"
            "<|python_tag|>brave_search.call(query=\"weather in Paris\", count=\"3\")<|eom_id|>"
            "{\"temp\": 21}{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}<|eom_id|>"
            "\"12:00\"{\n    \"name\": \"f\",\n    \"parameters\": {\n        \"a\": [\n"
            "            1,\n            2\n        ],\n        \"b\": {}\n    }\n}");
}

// --- Marks ----------------------------------------------------------------------------------

// The rendered text with each marked range in brackets.
std::string Marked(const std::string& source, const Variables& vars) {
  auto t = Template::Parse(source);
  if (!t.ok()) return std::string(t.status().message());
  auto r = t->Render(vars);
  if (!r.ok()) return std::string(r.status().message());
  std::string out;
  size_t pos = 0;
  for (const auto& [b, e] : r->marked) {
    EXPECT_LT(b, e);
    EXPECT_LE(pos, b);
    out += r->text.substr(pos, b - pos) + "[" + r->text.substr(b, e - b) + "]";
    pos = e;
  }
  return out + r->text.substr(pos);
}

TEST(JinjaTest, MarksFollowMarkedTextIntoTheOutput) {
  Variables v;
  v["c"] = Value::MarkedString("  Hi <|im_end|> there  ");
  v["t"] = Value::MarkedString("<think>\nwhy\n</think>\n\nanswer");
  v["plain"] = Value::String("P");
  EXPECT_EQ(Marked("<{{ c }}>{{ plain }}", v), "<[  Hi <|im_end|> there  ]>P");
  EXPECT_EQ(Marked("{{ '<s>' + c|trim + '</s>' }}", v), "<s>[Hi <|im_end|> there]</s>");
  EXPECT_EQ(Marked("{{ c.split()[1] }}|{{ c[2:4] }}|{{ c|trim|first }}", v),
            "[<|im_end|>]|[Hi]|[H]");
  EXPECT_EQ(Marked("{{ t.split('</think>')[-1].lstrip('\n') }}|"
                   "{{ t.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }}",
                   v),
            "[answer]|[why]");
  // Text computed from marked text in other ways is marked as a whole.
  EXPECT_EQ(Marked("{{ c|upper }}", v), "[  HI <|IM_END|> THERE  ]");
  EXPECT_EQ(Marked("{{ [plain, c|trim]|tojson }}", v), "[[\"P\", \"Hi <|im_end|> there\"]]");
  EXPECT_EQ(Marked("{{ plain ~ c|trim ~ plain }}", v), "P[Hi <|im_end|> there]P");
  EXPECT_EQ(Marked("{{ [plain, plain]|join(c|trim|first) }}", v), "P[H]P");
  // Touching ranges merge.
  EXPECT_EQ(Marked("{{ c|trim }}{{ c|trim }}", v), "[Hi <|im_end|> thereHi <|im_end|> there]");
  // Literals and unmarked variables never are.
  EXPECT_EQ(Marked("{{ '<|im_end|>' }}{{ plain }}", v), "<|im_end|>P");
}

// --- Errors -----------------------------------------------------------------------------------

TEST(JinjaTest, SyntaxErrorsNameTheirPosition) {
  struct Case {
    const char* source;
    const char* message;
  };
  const Case cases[] = {
      {"{{ 1 + }}", "line 1, column 8: unexpected '}}'"},
      {"a\nb {{ x", "line 2, column 3: unexpected end of template"},
      {"{% if x %}\n{% for y in z %}\n{% endif %}", "line 3, column 4: unexpected '{% endif %}'"},
      {"{% if x %}never closed", "line 1, column 1: this block is never closed"},
      {"{% frobnicate %}", "line 1, column 4: unknown statement '{% frobnicate %}'"},
      {"{% include 'x' %}", "the '{% include %}' statement is not supported"},
      {"{{ x | nofilter }}", "line 1, column 8: no filter named 'nofilter'"},
      {"{{ x is notatest }}", "line 1, column 9: no test named 'notatest'"},
      {"{{ 'unterminated }}", "line 1, column 4: unterminated string literal"},
      {"{{ (1, 2 }}", "unexpected '}'"},
      {"{# no end", "missing end of comment tag"},
      {"{% break %}", "'break' outside of a loop"},
      {"{{ x @ y }}", "unexpected character '@'"},
      {"  {{ f(a=1, 2) }}", "line 1, column 13: positional argument follows keyword argument"},
      {"{{ 'é' ~ }}\n", "line 1, column 10: unexpected '}}'"},  // columns count code points
  };
  for (const Case& c : cases) {
    auto t = Template::Parse(c.source);
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.source;
    EXPECT_THAT(t.status().message(), HasSubstr(c.message)) << c.source;
  }
  auto bad = Template::Parse("ok \xff\xfe");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("not valid UTF-8"));
}

TEST(JinjaTest, RenderErrorsNameTheFailingConstruct) {
  auto t = Template::Parse("line one\n{% for m in messages %}{{ m.content.upper() }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  auto r = t->Render(Vars(R"({"messages": [{"content": 5}]})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("line 2, column "));
  EXPECT_THAT(r.status().message(), HasSubstr("'int' object has no attribute 'upper'"));
}

TEST(JinjaTest, LimitsAreEnforced) {
  // Nesting: parenthesized, chained, and "not not ..." expressions.
  for (const std::string& s :
       {std::string("{{ ") + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}",
        "{{ 1" +
            [] {
              std::string x;
              for (int i = 0; i < 5000; ++i) x += " + 1";
              return x;
            }() +
            " }}",
        std::string("{{ ") +
            [] {
              std::string x;
              for (int i = 0; i < 5000; ++i) x += "not ";
              return x;
            }() +
            "1 }}",
        [] {
          std::string x;
          for (int i = 0; i < 5000; ++i) x += "{% if true %}";
          return x;
        }()}) {
    auto t = Template::Parse(s);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  }
  // Unbounded recursion, work and output.
  EXPECT_THAT(R("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
              HasSubstr("RESOURCE_EXHAUSTED: line 1"));
  RenderOptions small;
  small.limits.max_steps = 10000;
  EXPECT_THAT(R("{% for i in range(100000) %}{% endfor %}", {}, small),
              HasSubstr("more than 10000 evaluation steps"));
  small.limits.max_string_bytes = 1000;
  EXPECT_THAT(R("{% for i in range(100) %}0123456789abcdef{% endfor %}", {}, small),
              HasSubstr("the output exceeds the limit of 1000 bytes"));
  EXPECT_THAT(R("{{ 'x' * 100000 }}", {}, small), HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_THAT(
      R("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}{{ ns.s|length }}"),
      HasSubstr("RESOURCE_EXHAUSTED"));
}

TEST(JinjaTest, FromJson) {
  auto v =
      Value::FromJson(R"({"b": [1, 2.5, "x", null, true, {"z": -3}], "a": 18446744073709551615})");
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->kind(), Value::Kind::kDict);
  ASSERT_EQ(v->dict_items().size(), 2u);
  EXPECT_EQ(v->dict_items()[0].first, "b");  // key order kept
  const Value* b = v->Find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->list_items().size(), 6u);
  EXPECT_EQ(b->list_items()[0].int_value(), 1);
  EXPECT_EQ(b->list_items()[1].float_value(), 2.5);
  EXPECT_EQ(b->list_items()[2].string_value(), "x");
  EXPECT_EQ(b->list_items()[3].kind(), Value::Kind::kNone);
  EXPECT_EQ(v->Find("a")->kind(), Value::Kind::kFloat);  // beyond int64
  EXPECT_FALSE(Value::FromJson("{nope").ok());
}

// --- Robustness -------------------------------------------------------------------------------

// Parsing and rendering arbitrary damage to a realistic template returns a
// status (ok or not) and never crashes or hangs.
TEST(JinjaTest, MalformedTemplatesNeverCrash) {
  const std::string base =
      "{%- set ns = namespace(i=0) %}{%- for m in messages[::-1] %}{%- if m.role == 'user' and "
      "not m.content.startswith('<x>') %}{%- set ns.i = loop.index0 %}{%- endif %}{%- endfor %}"
      "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
      "message.content|trim + '<|im_end|>\\n' }}{%- if loop.last and message.content is string %}"
      "{{ message.content.split('</think>')[-1].lstrip('\\n')|tojson(indent=2) }}{%- endif %}"
      "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
      "{# comment #}{% macro f(a, b=1) %}{{ a ~ b }}{% endmacro %}{{ f(1) }}{{ [1, 2][1:] }}"
      "{{ {'a': (1, 2.5, none)}|dictsort }}{% raw %}{{ raw }}{% endraw %}";
  const Variables vars =
      Vars(R"({"messages": [{"role": "user", "content": "hi <x>"}, {"role": "assistant",
               "content": "a</think>\n\nb"}], "add_generation_prompt": true})");
  ASSERT_TRUE(Template::Parse(base).ok());
  ASSERT_TRUE(Template::Parse(base)->Render(vars).ok());
  const std::string alphabet = "{}%#-+()[]'\".,:|~*/=<>! \n\\abcdefmnsloptxy0123456789_";
  std::mt19937 rng(12345);
  RenderOptions options;
  options.limits.max_steps = 200000;
  options.limits.max_string_bytes = 1 << 20;
  int parsed = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s.erase(pos, 1 + rng() % 8);
          break;
        case 1:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 2:
          s[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 3:
          s.resize(pos);
          break;
      }
    }
    auto t = Template::Parse(s);
    if (!t.ok()) continue;
    ++parsed;
    auto r = t->Render(vars, options);
    (void)r;
  }
  // Random soup of template syntax.
  for (int iter = 0; iter < 4000; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 80);
    static const char* const kPieces[] = {
        "{{",     "}}",       "{%",          "%}",     "{#",      "#}",       "-",     "+",
        " if ",   " for ",    " in ",        " else ", " endif ", " endfor ", " set ", "x",
        "=",      "(",        ")",           "[",      "]",       "{",        "}",     "'a'",
        "1",      "|",        "trim",        "length", " is ",    "defined",  ".",     ",",
        ":",      "loop",     "namespace()", " not ",  " and ",   "~",        "**",    "//",
        "macro ", "endmacro", "range(9)",    "\n"};
    for (int i = 0; i < n; ++i) s += kPieces[rng() % (sizeof(kPieces) / sizeof(kPieces[0]))];
    auto t = Template::Parse(s);
    if (!t.ok()) continue;
    ++parsed;
    (void)t->Render(vars, options);
  }
  EXPECT_GT(parsed, 100);  // the mutations do reach the renderer
}

}  // namespace
}  // namespace minfer::tokenizer::jinja

namespace minfer::tokenizer::jinja {
namespace {

// A legal template whose loops would run for seconds is cut off by the
// default step budget (20,000,000 steps let an empty nested loop run ~10 s
// of CPU; the budget is now sized for ~100 ms, see Limits::max_steps), and
// steps are weighted so that the cheap-looking loop iteration pays for the
// scope and `loop` variable it builds.
TEST(JinjaBudgetTest, HostileLoopsAreCutOffByTheDefaultBudget) {
  EXPECT_EQ(Limits().max_steps, 1'000'000);
  EXPECT_EQ(Limits().max_total_bytes, size_t{256} << 20);
  for (const char* source : {
           "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
           "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
           "{% set s = 'x' * 60000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
       }) {
    auto t = Template::Parse(source);
    ASSERT_TRUE(t.ok()) << t.status();
    auto r = t->Render({});
    ASSERT_FALSE(r.ok()) << source;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << source;
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("the template ran more than 1000000 evaluation steps"))
        << source;
  }
  // The weights: an iteration is 10 steps, so 1,000 empty iterations take
  // 10,000 plus the few of the statement and range(1000) itself.
  auto loop = Template::Parse("{% for i in range(1000) %}{% endfor %}");
  ASSERT_TRUE(loop.ok());
  auto r = loop->Render({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->steps, 10'000);
  EXPECT_LE(r->steps, 10'010);
  // 64 KiB emitted costs 4,096 steps on top.
  auto big = Template::Parse("{{ s }}");
  ASSERT_TRUE(big.ok());
  Variables vars;
  vars["s"] = Value::String(std::string(65536, 'a'));
  auto b = big->Render(vars);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->text.size(), 65536u);
  EXPECT_GE(b->steps, 4096);
  EXPECT_LE(b->steps, 4100);
}

// What real conversations need stays far inside the budget: 4,000 messages
// through a ChatML loop of the shape the real templates have.
TEST(JinjaBudgetTest, LongConversationsStillRender) {
  auto t = Template::Parse(
      "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<Value> messages;
  for (int i = 0; i < 4000; ++i) {
    messages.push_back(Value::Dict({{"role", Value::String(i % 2 ? "assistant" : "user")},
                                    {"content", Value::String(absl::StrCat("message ", i))}}));
  }
  Variables vars;
  vars["messages"] = Value::List(std::move(messages));
  vars["add_generation_prompt"] = Value::Bool(true);
  auto r = t->Render(vars);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(absl::StrContains(r->text, "<|im_start|>assistant\nmessage 3999<|im_end|>\n"));
  EXPECT_GT(r->steps, 4000 * 20);  // ~26 per message
  EXPECT_LT(r->steps, Limits().max_steps / 5);
}

}  // namespace
}  // namespace minfer::tokenizer::jinja
