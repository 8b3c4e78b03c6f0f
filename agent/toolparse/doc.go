// Package toolparse finds tool calls written as text by models that do not
// produce native tool calls (or whose chat template lost them): Hermes/Qwen
// <tool_call> tags, <|tool_call|>, [TOOL_CALL] and [TOOL_CALLS],
// <function_call>, <function=NAME> (with a JSON body, or Qwen3-Coder's
// <parameter=KEY> elements), JSON in code fences and bare JSON objects in
// the shapes models are trained on. Reasoning in <think> blocks
// is removed first, so a call the model only considered is not run.
//
// A Parser knows the tool names on offer; JSON naming anything else is
// prose, not a call. That, and requiring an arguments field for untagged
// JSON, keeps examples in explanations from being executed.
//
// It only parses text: it never runs, validates or repairs a call, and it
// knows nothing of the sandbox.
package toolparse
