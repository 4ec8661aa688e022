package bcpagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/runtime"
)

// queryTool is BCPQuery: a Controller asks a Reader. It returns as soon as
// the gateway accepted or refused the query; the answer comes later as a
// delivery, the model's next turn.
func (a *Agent) queryTool() tool {
	return tool{
		def: llm.Tool{
			Name: agents.ToolQuery,
			Description: "Ask a Reader agent for information through the BCP gateway. You choose the exact shape of the answer: " +
				"category 1 typed fields (boolean, enum, integer with min and max), category 2 short answers to questions " +
				"(each with a word limit and an expected_format), or category 3 a summary (directive and max_words) that an operator approves. " +
				"The gateway checks the query against your channel's limits and bandwidth budget. " +
				"This tool returns at once with the query_id or the refusal; the validated answer arrives later as a new message. " +
				"Smaller shapes cost fewer bits of your budget.",
			Schema: mustSchema(QuerySchema()),
		},
		run: a.runQuery,
	}
}

type queryArgs struct {
	To        string         `json:"to"`
	Category  bcp.Category   `json:"category"`
	Fields    []bcp.Field    `json:"fields"`
	Questions []bcp.Question `json:"questions"`
	Directive string         `json:"directive"`
	MaxWords  int            `json:"max_words"`
	Context   string         `json:"context"`
}

func (a *Agent) runQuery(ctx context.Context, c *runtime.Client, raw json.RawMessage) (string, error) {
	var args queryArgs
	if err := decodeArgs(agents.ToolQuery, raw, &args); err != nil {
		return "", err
	}
	if args.To == "" {
		return "", errors.New("BCPQuery needs \"to\": the name of the Reader agent to ask")
	}
	if err := ctx.Err(); err != nil {
		// c.Query would send the query before it looks at ctx.
		return "", err
	}
	id, err := newID("req-")
	if err != nil {
		return "", err
	}
	sent, err := c.Query(ctx, runtime.QueryRequest{
		RequestID: id,
		To:        args.To,
		Category:  args.Category,
		Spec: runtime.QuerySpec{
			Fields: args.Fields, Questions: args.Questions, Directive: args.Directive,
			MaxWords: args.MaxWords, Context: args.Context,
		},
	})
	var refused *runtime.QueryRefused
	if errors.As(err, &refused) {
		return "", fmt.Errorf("the gateway refused the query: %s", refused.Reason)
	}
	if err != nil {
		return "", fmt.Errorf("query not sent: %w", err)
	}
	return fmt.Sprintf("Query %s sent to %s (request %s, %s charged). The validated answer will arrive later as a new message naming query %s; there is nothing to wait for in this turn.",
		sent.QueryID, sent.ToAgent, id, bcp.FormatBits(sent.BandwidthBits), sent.QueryID), nil
}

// respondTool is BCPRespond, offered while the running turn's query is
// unanswered; its schema is the query's shape.
func (a *Agent) respondTool(q runtime.Query) tool {
	spec := querySpec(q)
	return tool{
		def: llm.Tool{
			Name: agents.ToolRespond,
			Description: fmt.Sprintf("Answer BCP query %s from %s (Cat-%d). The response must have exactly this shape:\n%s"+
				"The gateway validates it and this tool returns the verdict; on a refusal, correct the response and call again.",
				q.QueryID, q.FromAgent, q.Category, describeSpec(spec, "- ")),
			Schema: mustSchema(RespondSchema(q)),
		},
		run: a.runRespond,
	}
}

type respondArgs struct {
	QueryID  string          `json:"query_id"`
	Response json.RawMessage `json:"response"`
}

func (a *Agent) runRespond(ctx context.Context, c *runtime.Client, raw json.RawMessage) (string, error) {
	var args respondArgs
	if err := decodeArgs(agents.ToolRespond, raw, &args); err != nil {
		return "", err
	}
	q := a.open
	if q == nil {
		return "", errors.New("there is no open query to answer")
	}
	if args.QueryID != q.QueryID {
		return "", fmt.Errorf("query_id %q is not the open query; answer query_id %q", args.QueryID, q.QueryID)
	}
	response, err := responseObject(args.Response)
	if err != nil {
		return "", err
	}
	r, got, err := a.awaitVerdict(ctx, "q:"+q.QueryID, "answer to query "+q.QueryID, func() (*runtime.Pending, error) {
		return c.SendRespond(q.QueryID, response)
	})
	switch {
	case err != nil:
		return "", err
	case !got:
		a.open = nil // answered, as far as this turn can know
		return a.noVerdictYet("answer"), nil
	case !r.Success:
		return "", fmt.Errorf("the gateway refused the answer: %s. Correct the response and call BCPRespond again", r.Detail)
	}
	a.open = nil
	return "Accepted: " + r.Detail, nil
}

// publishTool is BCPPublish over the announced subscriptions.
func (a *Agent) publishTool(subs []runtime.ActiveSubscription) tool {
	var b strings.Builder
	b.WriteString("Publish data to a Controller agent that subscribed to it, through the BCP gateway. Publish only when you have something new and relevant. " +
		"The response must have exactly the shape of the chosen subscription; the gateway validates it and this tool returns the verdict. " +
		"On a refusal, correct the response and call again. Subscriptions:\n")
	for _, s := range subs {
		spec := subscriptionSpec(s)
		fmt.Fprintf(&b, "- subscription_id %q, controller %q (Cat-%d, %s):\n%s", s.SubscriptionID, s.Controller, s.Category, bcp.FormatBits(bcp.Bits(spec)), describeSpec(spec, "    "))
		if s.Category == bcp.Cat3 {
			b.WriteString("    (Cat-3: an operator approves each publish before it is delivered.)\n")
		}
		if r := s.RateLimit; r != nil {
			fmt.Fprintf(&b, "    (Rate limit: at most %d publishes in any %s; more are refused with rate_limited, so publish what matters most.)\n",
				r.Max, agents.ShortDuration(r.Window()))
		}
	}
	return tool{
		def: llm.Tool{
			Name:        agents.ToolPublish,
			Description: b.String(),
			Schema:      mustSchema(PublishSchema(subs)),
		},
		run: a.runPublish,
	}
}

type publishArgs struct {
	SubscriptionID string          `json:"subscription_id"`
	Controller     string          `json:"controller"`
	Response       json.RawMessage `json:"response"`
}

func (a *Agent) runPublish(ctx context.Context, c *runtime.Client, raw json.RawMessage) (string, error) {
	var args publishArgs
	if err := decodeArgs(agents.ToolPublish, raw, &args); err != nil {
		return "", err
	}
	if args.SubscriptionID == "" || args.Controller == "" {
		return "", errors.New("BCPPublish needs subscription_id and controller, as announced")
	}
	response, err := responseObject(args.Response)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("publish to %s of %s", args.SubscriptionID, args.Controller)
	r, got, err := a.awaitVerdict(ctx, "s:"+args.SubscriptionID, what, func() (*runtime.Pending, error) {
		return c.SendPublish(args.SubscriptionID, args.Controller, response)
	})
	switch {
	case err != nil:
		return "", err
	case !got:
		return a.noVerdictYet("publish"), nil
	case !r.Success:
		return "", fmt.Errorf("the gateway refused the publish: %s. Correct the response and call BCPPublish again", r.Detail)
	}
	return "Published: " + r.Detail, nil
}

// responseObject returns the response to send. Models sometimes pass the
// object as a JSON string holding it; that string is unwrapped. Anything
// else goes to the gateway as it is, whose validation is the judge.
func responseObject(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("the response is missing: pass it as a JSON object in \"response\"")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &obj) == nil && obj != nil {
			return json.RawMessage(s), nil
		}
	}
	return raw, nil
}

func (a *Agent) noVerdictYet(what string) string {
	return fmt.Sprintf("The gateway has not given its verdict on this %s within %s. Cat-3 items (and Cat-2 items with anomalies) wait for an operator's review; "+
		"you will be told the verdict at the start of a later turn. Do not send the same data again.", what, a.cfg.VerdictWait)
}

// newID returns prefix and 12 random hex digits.
func newID(prefix string) (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random id: %w", err)
	}
	return prefix + hex.EncodeToString(b[:]), nil
}
