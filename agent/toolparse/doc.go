// Package toolparse finds tool calls written as text by models that do not
// produce native tool calls (or whose chat template lost them): Hermes/Qwen
// <tool_call> tags, <|tool_call|>, [TOOL_CALL] and [TOOL_CALLS],
// <function_call>, <function=NAME> (with a JSON body, or Qwen3-Coder's
// <parameter=KEY> elements), JSON in code fences and bare JSON objects in
// the shapes models are trained on, and the formats of special tokens that
// llama.cpp's chat parser knows: Mistral's [TOOL_CALLS]NAME[ARGS], DeepSeek
// R1 and V3.1, gpt-oss harmony, Functionary v3.2, Kimi K2, GLM 4.5, MiniMax
// M2 and pythonic call lists (docs/tool-call-formats.md has the table).
// Reasoning in <think> blocks (and harmony's analysis channel) is removed
// first, so a call the model only considered is not run.
//
// A Parser knows the tool names on offer; a call naming anything else is
// prose. That, requiring an arguments field for untagged JSON, treating
// markup in inline code as a mention, and (WithCheck) the schema check for
// formats without markers of their own keep examples in explanations from
// being executed.
//
// It only parses text: it never runs or repairs a call, and it knows
// nothing of the sandbox.
package toolparse
