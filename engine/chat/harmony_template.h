// minfer's chat template for gpt-oss's Harmony format, written into the
// gpt-oss files `minfer mkmodel` makes (real gpt-oss GGUFs carry OpenAI's
// own template in tokenizer.chat_template, which the Jinja interpreter runs
// the same way). The format, as OpenAI documents it:
//   <|start|>system<|message|>{identity, knowledge cutoff, current date,
//     reasoning effort, the valid channels}<|end|>
//   <|start|>developer<|message|># Instructions\n\n{first system message}
//     \n\n# Tools ... {tools as a TypeScript namespace}<|end|>
//   <|start|>user<|message|>{content}<|end|>
//   <|start|>assistant<|channel|>final<|message|>{content}<|end|>
//   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>
//     {arguments}<|call|>
//   <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>
//     {result}<|end|>
// and the generation prompt <|start|>assistant: the model then writes
// <|channel|>analysis<|message|>...<|end|> (its reasoning) and
// <|start|>assistant<|channel|>final<|message|>...<|return|> (its answer), or
// a tool call ending in <|call|>. Variables: messages, tools,
// add_generation_prompt, reasoning_effort ("medium" by default),
// model_identity; an assistant message's reasoning (thinking or
// reasoning_content) is kept only for its tool calls and for the last turn
// of a conversation being continued, as Harmony asks.
#ifndef MINFER_ENGINE_CHAT_HARMONY_TEMPLATE_H_
#define MINFER_ENGINE_CHAT_HARMONY_TEMPLATE_H_

#include "absl/strings/string_view.h"

namespace minfer::chat {

inline constexpr absl::string_view kHarmonyChatTemplate = R"JINJA({#- minfer's Harmony (gpt-oss) chat template: engine/chat/harmony_template.h -#}
{%- macro ts_type(s) -%}
{%- if s.enum is defined -%}{%- for v in s.enum -%}{{- ' | ' if not loop.first else '' -}}{{- v | tojson -}}{%- endfor -%}
{%- elif s.type == 'string' -%}{{- 'string' -}}
{%- elif s.type == 'number' or s.type == 'integer' -%}{{- 'number' -}}
{%- elif s.type == 'boolean' -%}{{- 'boolean' -}}
{%- elif s.type == 'array' -%}{{- (ts_type(s['items']) if s['items'] is defined else 'any') + '[]' -}}
{%- else -%}{{- 'any' -}}
{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(first=0, instructions='', tool='') -%}
{%- if messages and messages[0].role in ['system', 'developer'] -%}
{%- set ns.instructions = messages[0].content -%}
{%- set ns.first = 1 -%}
{%- endif -%}
{{- '<|start|>system<|message|>' -}}
{{- model_identity if model_identity is defined else 'You are ChatGPT, a large language model trained by OpenAI.' -}}
{{- '\nKnowledge cutoff: 2024-06\nCurrent date: ' + strftime_now('%Y-%m-%d') -}}
{{- '\n\nReasoning: ' + (reasoning_effort if reasoning_effort is defined else 'medium') -}}
{{- '\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.' -}}
{%- if tools -%}
{{- "\nCalls to these tools must go to the commentary channel: 'functions'." -}}
{%- endif -%}
{{- '<|end|>' -}}
{%- if ns.instructions or tools -%}
{{- '<|start|>developer<|message|>' -}}
{%- if ns.instructions -%}
{{- '# Instructions\n\n' + ns.instructions + '\n\n' -}}
{%- endif -%}
{%- if tools -%}
{{- '# Tools\n\n## functions\n\nnamespace functions {\n\n' -}}
{%- for t in tools -%}
{%- set f = t.function if t.function is defined else t -%}
{%- if f.description is defined -%}{{- '// ' + f.description + '\n' -}}{%- endif -%}
{{- 'type ' + f.name + ' = ' -}}
{%- if f.parameters is defined and f.parameters.properties is defined and f.parameters.properties -%}
{{- '(_: {\n' -}}
{%- for name, p in f.parameters.properties.items() -%}
{%- if p.description is defined -%}{{- '// ' + p.description + '\n' -}}{%- endif -%}
{{- name + ('' if f.parameters.required is defined and name in f.parameters.required else '?') + ': ' + ts_type(p) + ',\n' -}}
{%- endfor -%}
{{- '}) => any;\n\n' -}}
{%- else -%}
{{- '() => any;\n\n' -}}
{%- endif -%}
{%- endfor -%}
{{- '} // namespace functions' -}}
{%- endif -%}
{{- '<|end|>' -}}
{%- endif -%}
{%- for m in messages[ns.first:] -%}
{%- if m.role == 'user' -%}
{{- '<|start|>user<|message|>' + m.content + '<|end|>' -}}
{%- elif m.role in ['system', 'developer'] -%}
{{- '<|start|>developer<|message|>' + m.content + '<|end|>' -}}
{%- elif m.role == 'assistant' -%}
{%- set thinking = m.thinking if m.thinking is defined and m.thinking else (m.reasoning_content if m.reasoning_content is defined and m.reasoning_content else '') -%}
{%- if m.tool_calls is defined and m.tool_calls -%}
{%- if thinking -%}
{{- '<|start|>assistant<|channel|>analysis<|message|>' + thinking + '<|end|>' -}}
{%- endif -%}
{%- for c in m.tool_calls -%}
{%- set f = c.function if c.function is defined else c -%}
{%- set ns.tool = f.name -%}
{{- '<|start|>assistant to=functions.' + f.name + '<|channel|>commentary json<|message|>' -}}
{{- f.arguments if f.arguments is string else (f.arguments | tojson) -}}
{{- '<|call|>' -}}
{%- endfor -%}
{%- elif loop.last and not add_generation_prompt -%}
{%- if thinking -%}
{{- '<|start|>assistant<|channel|>analysis<|message|>' + thinking + '<|end|>' -}}
{%- endif -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|return|>' -}}
{%- else -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' -}}
{%- endif -%}
{%- elif m.role == 'tool' -%}
{{- '<|start|>functions.' + (m.name if m.name is defined and m.name else ns.tool) + ' to=assistant<|channel|>commentary<|message|>' + m.content + '<|end|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start|>assistant' -}}
{%- endif -%})JINJA";

}  // namespace minfer::chat

#endif  // MINFER_ENGINE_CHAT_HARMONY_TEMPLATE_H_
