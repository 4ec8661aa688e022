// Package bcpagent is the runtime behind cmd/bcp-agent: it drives a real
// model (package llm) with the BCP tools, speaking the gateway's wire
// protocol through the runtime SDK.
//
// # Turns
//
// Each turn the gateway sends (a prompt, a query to a Reader, a delivery
// to a Controller) becomes a user message; the model is then called, its
// tool calls run, their results sent back, until it answers without a
// tool call or max_turns model calls were made (the start message's
// max_turns, else Config.MaxTurns). The system prompt is the definition's
// body. The conversation is kept across the turns of a session, so a
// Controller resumes with its context when a delivery arrives; it is
// bounded (Config.HistoryChars), dropping the oldest whole turns.
//
// A delivery's text is the gateway's own rendering (the prompt field),
// which quotes the data and frames it as validated output of an agent
// that reads untrusted content. Things the gateway says between turns (a
// query that timed out, the late verdict of a Cat-3 publish) are noted
// and put at the head of the model's next turn: the protocol has no turn
// of their own for them.
//
// Each turn ends with a result whose num_turns is the number of model
// calls, with the tokens the provider reported (usage, a new field).
// cost_usd is computed only from prices the operator gives
// (BCP_AGENT_USD_PER_MTOK_IN and _OUT, USD per million tokens); bcp-agent
// keeps no price list, since a guessed cost is worse than none, so
// without them cost_usd is 0.
//
// # Tools
//
// Only tools the definition lists are offered, and BCPRespond and
// BCPPublish only from the moment they can be used (below). Once offered,
// a tool stays listed for the session: while it cannot be used (no open
// query, no subscriptions) it is a stub that returns an error saying so,
// since Anthropic refuses a request whose history holds tool calls but
// that defines no tools.
//   - BCPQuery (to, category, fields | questions | directive, max_words,
//     context): returns as soon as the gateway accepted or refused the
//     query; the answer is a later delivery.
//   - BCPRespond (query_id, response): during the turn of a query, until
//     the gateway accepts an answer. Its schema is the query's shape.
//   - BCPPublish (subscription_id, controller, response): once the
//     gateway announced subscriptions. Its schema limits subscription_id
//     and controller to the announced values and gives each
//     subscription's response shape (see PublishSchema for why the anyOf
//     is on response rather than at the root, and why not a oneOf).
//   - WebFetch (url) and ReadFile (path): content tools for Readers.
//     WebFetch is never offered to an agent that also holds BCPQuery: a
//     Controller must not read untrusted content. (A Controller with
//     subscriptions only holds no BCPQuery and cannot be told apart; its
//     definition must not list WebFetch.) A Reader holding both can be
//     steered by a page into putting its files' contents into a URL it
//     fetches: a warning is logged at start, and its workdir should hold
//     only what it may disclose.
//
// # Network
//
// With HTTPS_PROXY or HTTP_PROXY set (a bcpgw sandbox with a network list
// sets both to the gateway's egress proxy, its only way out), the model's
// requests and WebFetch's all go through the proxy, loopback destinations
// included (a local model server), and NO_PROXY is ignored. WebFetch's
// defence against being steered into the operator's network then moves
// from the address dialled, which is always the proxy's, to the URL: a
// host that is localhost or a special-purpose address written literally
// is refused before the request, redirects included, and names are left
// to the proxy, which resolves them and refuses those that lead to
// loopback or link-local addresses or are not in sandbox.network. A
// refusal by the proxy reaches the model as the proxy's reason.
//
// Every spec becomes a JSON Schema (SpecSchema): exact keys, all
// required, additionalProperties false, enums, integer ranges, date and
// integer syntax; word limits, formats and the plain-text rule (what the
// gateway flags as anomalies) in descriptions. A model that follows the
// schema produces a valid response the first time.
//
// The gateway's verdict is the tool result: "Published: ..." or the
// refusal with its code and detail, so the model can correct itself
// within max_turns. Unknown tools, arguments that are not a JSON object,
// and arguments that do not decode are told to the model as tool errors.
// A verdict is awaited for Config.VerdictWait; one held for an operator's
// review comes later as a note, and a second publish to the same
// subscription is refused to the model while the first's verdict is
// outstanding (verdicts of one id are matched in order).
//
// An interrupt ends the turn between tool calls: the calls the model made
// after the running one are not run, and each is answered "not run: turn
// interrupted", since both APIs refuse a tool call left without a result.
// An answer cut off by the token limit (max_tokens, length) is logged as
// a warning; its last tool call, which may be incomplete, is not run but
// returned to the model as an error so it sends it again, and a final
// answer cut off fails the turn.
//
// # Failures
//
// A provider error that retries cannot fix (a refused key, an unknown
// model, a refused request) fails the turn: the gateway gets an error
// message naming the provider, the status, the provider's words and what
// to check, and the result says is_error. A missing model, an unknown
// provider or a missing key is found at start and ends the session
// before ready, with the same kind of message.
package bcpagent
