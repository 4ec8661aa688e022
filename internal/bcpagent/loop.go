package bcpagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/runtime"
)

// Audit copies of model text and tool results are cut to these sizes: the
// gateway keeps them in its event log, and a fetched page can be large.
const (
	auditTextMax   = 16 << 10
	auditResultMax = 4 << 10
)

// turn runs one turn of the gateway's: content (after any notes) as the
// user's message, then model calls and tool calls until the model answers
// without calling a tool, or max_turns model calls were made. The turn's
// result reports the calls and the tokens. A provider failure is told to
// the gateway as an error message and fails the turn; the conversation
// keeps the turn's messages either way, so a delivery is not forgotten.
func (a *Agent) turn(ctx context.Context, c *runtime.Client, content string) error {
	msgs := []llm.Message{{Role: llm.RoleUser, Content: a.takeNotes() + content}}
	var stats turnStats
	defer func() {
		c.Report(stats.report(a.prices))
		a.keep(msgs)
	}()
	nudged := false
	for {
		if stats.calls >= a.maxTurns {
			err := fmt.Errorf("max_turns (%d) reached before the model finished the turn", a.maxTurns)
			a.fail(c, err)
			return err
		}
		tools := a.tools()
		req := llm.Request{System: a.self.SystemPrompt, Messages: a.conversation(msgs), Tools: defs(tools)}
		resp, err := a.model.Complete(ctx, req)
		if ctx.Err() != nil {
			return ctx.Err() // interrupted or shutting down
		}
		if err != nil {
			a.fail(c, err)
			return err
		}
		stats.add(resp.Usage)
		msgs = append(msgs, resp.Message)
		if resp.Message.Content != "" {
			_ = c.Text(cut(resp.Message.Content, auditTextMax))
		}
		calls := resp.Message.ToolCalls
		if len(calls) == 0 {
			if a.open != nil && !nudged {
				// One reminder: a query left unanswered only times out.
				nudged = true
				msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf(
					"You have not answered query %s yet. Call BCPRespond with query_id %q and a response in the shape its schema gives.",
					a.open.QueryID, a.open.QueryID)})
				continue
			}
			if resp.Truncated {
				// The turn's last word is cut off: not a success.
				err := fmt.Errorf("the model's answer was cut off by its token limit (stop reason %s); raise BCP_AGENT_MAX_TOKENS", resp.StopReason)
				a.fail(c, err)
				return err
			}
			return nil
		}
		if resp.Truncated {
			a.log.Printf("[WARN] the model's answer was cut off by its token limit (stop reason %s): its last tool call (%s) is not run, the model is asked to send it again; raise BCP_AGENT_MAX_TOKENS if this recurs",
				resp.StopReason, calls[len(calls)-1].Name)
		}
		// Every call gets a result, run or not: both APIs refuse a
		// conversation with a tool call left unanswered.
		for i, call := range calls {
			notRun := ""
			switch {
			case ctx.Err() != nil:
				// Interrupted: no further publish, answer or query may
				// be sent. The skipped call is still audited, as not run.
				notRun = "not run: turn interrupted"
			case resp.Truncated && i == len(calls)-1:
				// Its arguments may be cut off midway: running it could
				// send half a response.
				notRun = "not run: your answer was cut off by the token limit, so this call may be incomplete. Send it again in full, shorter if need be"
			}
			out, isErr := a.call(ctx, c, tools, call, notRun)
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: out, IsError: isErr})
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// fail tells the gateway why a turn failed.
func (a *Agent) fail(c *runtime.Client, err error) {
	a.log.Printf("[ERROR] %v", err)
	_ = c.Error("bcp-agent: " + err.Error())
}

// call runs one tool call and returns what the model is told. Unknown
// tools, malformed arguments and tool failures are told to the model as
// errors, so it can correct itself; none ends the turn. A call with a
// notRun reason is not run: the reason is its error. Either way the call
// and its result are audited.
func (a *Agent) call(ctx context.Context, c *runtime.Client, tools []tool, call llm.ToolCall, notRun string) (string, bool) {
	input := json.RawMessage(call.Arguments)
	if !json.Valid(input) {
		input, _ = json.Marshal(call.Arguments) // audited as the string it was
	}
	_ = c.ToolUse(call.ID, call.Name, input)
	var out string
	var err error
	if notRun != "" {
		err = errors.New(notRun)
	} else {
		out, err = a.run(ctx, c, tools, call)
	}
	if err != nil {
		out = err.Error()
	}
	_ = c.ToolResult(call.ID, call.Name, cut(out, auditResultMax), err != nil)
	return out, err != nil
}

func (a *Agent) run(ctx context.Context, c *runtime.Client, tools []tool, call llm.ToolCall) (string, error) {
	var t *tool
	var names []string
	for i := range tools {
		names = append(names, tools[i].def.Name)
		if tools[i].def.Name == call.Name {
			t = &tools[i]
		}
	}
	if t == nil {
		if len(names) == 0 {
			return "", fmt.Errorf("unknown tool %q: you have no tools in this turn", call.Name)
		}
		return "", fmt.Errorf("unknown tool %q: the tools you have are %s", call.Name, strings.Join(names, ", "))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(call.Arguments), &obj); err != nil || obj == nil {
		return "", fmt.Errorf("the arguments of %s are not a JSON object (%s): send one JSON object that matches the tool's schema", call.Name, jsonProblem(call.Arguments, err))
	}
	return t.run(ctx, c, json.RawMessage(call.Arguments))
}

func jsonProblem(args string, err error) string {
	if err == nil {
		return "got " + strconv.Quote(cut(args, 80))
	}
	return err.Error()
}

// decodeArgs decodes a tool's arguments strictly: an unknown key is an
// error the model can fix.
func decodeArgs(tool string, raw json.RawMessage, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the arguments of %s do not match its schema: %v", tool, err)
	}
	return nil
}

// conversation is the kept history followed by the running turn.
func (a *Agent) conversation(turn []llm.Message) []llm.Message {
	var out []llm.Message
	for _, t := range a.history {
		out = append(out, t...)
	}
	return append(out, turn...)
}

// keep adds a finished turn to the history and drops the oldest turns
// while the history is over its size bound. A turn is dropped whole, so
// tool calls and their results stay together.
func (a *Agent) keep(turn []llm.Message) {
	a.history = append(a.history, turn)
	total := 0
	for _, t := range a.history {
		total += size(t)
	}
	for len(a.history) > 1 && total > a.cfg.HistoryChars {
		total -= size(a.history[0])
		a.history = a.history[1:]
	}
}

func size(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
		for _, tc := range m.ToolCalls {
			n += len(tc.Arguments)
		}
	}
	return n
}

func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	// Back off to a rune boundary.
	for max > 0 && (s[max]&0xC0) == 0x80 {
		max--
	}
	return s[:max] + fmt.Sprintf(" [... %d more bytes]", len(s)-max)
}

// turnStats counts one turn's model calls and tokens.
type turnStats struct {
	calls int
	usage llm.Usage
}

func (s *turnStats) add(u llm.Usage) {
	s.calls++
	s.usage.InputTokens += u.InputTokens
	s.usage.OutputTokens += u.OutputTokens
}

func (s turnStats) report(p prices) runtime.TurnReport {
	r := runtime.TurnReport{NumTurns: s.calls}
	if s.usage != (llm.Usage{}) {
		r.Usage = &runtime.Usage{InputTokens: s.usage.InputTokens, OutputTokens: s.usage.OutputTokens}
		r.CostUSD = p.cost(s.usage)
	}
	return r
}

// prices are the operator's prices in USD per million tokens. bcp-agent
// keeps no price list of its own: prices change and differ by provider,
// and a made-up cost is worse than none. Without prices cost_usd is 0
// and the result still reports the tokens.
type prices struct {
	in, out float64
}

func (p prices) cost(u llm.Usage) float64 {
	return (float64(u.InputTokens)*p.in + float64(u.OutputTokens)*p.out) / 1e6
}

// readPrices reads BCP_AGENT_USD_PER_MTOK_IN and _OUT, in this order, so
// that with both wrong the error always names the first.
func readPrices(env func(string) string) (prices, error) {
	var p prices
	for _, price := range []struct {
		name string
		dst  *float64
	}{{"BCP_AGENT_USD_PER_MTOK_IN", &p.in}, {"BCP_AGENT_USD_PER_MTOK_OUT", &p.out}} {
		name, dst := price.name, price.dst
		v := env(name)
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return prices{}, errors.New(name + " " + strconv.Quote(v) + ": want a non-negative number (USD per million tokens)")
		}
		*dst = f
	}
	return p, nil
}
