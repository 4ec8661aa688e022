// Package llm is a small client for two model APIs, enough for a tool
// loop: the OpenAI-compatible Chat Completions API (OpenAI itself, and the
// compatible servers of Ollama, vLLM and llama.cpp) and the Anthropic
// Messages API.
//
// Both are reached through one neutral shape ([Request], [Message],
// [Response]) so the caller's loop does not depend on the provider. Only
// what the loop needs is modelled: a system prompt, text, tool calls and
// tool results, tool definitions with a JSON Schema, and token usage. No
// streaming: a turn of the loop waits for the whole answer anyway.
//
// Every call takes a context and every HTTP request is bound to it; each
// attempt waits at most [Options].ResponseHeaderTimeout for an answer.
// Rate limits (429), timeouts (408 and no answer in time), server errors
// (5xx, and Anthropic's 529 "overloaded") and refused or reset
// connections are retried a bounded number of times with exponential
// backoff and full jitter, honoring Retry-After in seconds or as an HTTP
// date. DNS, TLS and certificate errors and malformed URLs are not
// retried: they would fail again. Failures become an *[APIError] whose
// Kind says what an operator must fix (a key, a model name, a base URL),
// with the provider's own message kept and the API key redacted from it.
//
// OpenAI's own API (api.openai.com) gets the token cap as
// max_completion_tokens, which its o-series and gpt-5 models require;
// compatible servers get max_tokens, which they know.
//
// Requests go through the HTTP proxy that HTTPS_PROXY or HTTP_PROXY (in
// the environment given to [New]) names, for every destination, a
// loopback base URL included, and NO_PROXY is not read: inside a bcpgw
// sandbox the gateway's egress proxy is the only way out ([Proxy.Func]).
// What the proxy refuses or cannot reach is [KindProxy], never taken for
// a refused key, with the proxy's reason (its Proxy-Status header).
//
// Tool arguments are kept as the raw text the model produced: a model may
// write malformed JSON, and the caller decides what to tell it.
package llm
