package bcpagent

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/runtime"
)

// tool is one tool offered to the model: its definition and what runs it.
type tool struct {
	def llm.Tool
	run func(ctx context.Context, c *runtime.Client, args json.RawMessage) (string, error)
}

// tools returns the tools to offer in the next model call. They depend on
// the moment: BCPRespond is usable only while this turn's query is
// unanswered, BCPPublish only while subscriptions are announced. Only
// tools the agent's definition lists are offered; the gateway checks the
// BCP rights again, so a runtime cannot grant itself one.
//
// A tool offered once stays in every later call of the session, as a stub
// that only returns an error while it cannot be used: Anthropic refuses a
// request whose history holds tool_use or tool_result blocks but that
// defines no tools, and a model that sees its earlier calls of a tool
// may call it again whether it is listed or not.
func (a *Agent) tools() []tool {
	var out []tool
	if a.held[agents.ToolQuery] {
		out = append(out, a.queryTool())
	}
	if a.held[agents.ToolRespond] {
		switch {
		case a.open != nil:
			out = append(out, a.respondTool(*a.open))
		case a.offered[agents.ToolRespond]:
			out = append(out, unusable(agents.ToolRespond, "Answer a BCP query from a Controller.",
				"no open query: BCPRespond can only be used while a bcp_query is open"))
		}
	}
	if a.held[agents.ToolPublish] {
		switch {
		case len(a.subs) > 0:
			out = append(out, a.publishTool(a.subs))
		case a.offered[agents.ToolPublish]:
			out = append(out, unusable(agents.ToolPublish, "Publish data to a Controller that subscribed to it.",
				"no subscriptions: BCPPublish can only be used while the gateway has announced subscriptions, and none are active now"))
		}
	}
	if a.held[ToolWebFetch] {
		out = append(out, a.webFetchTool())
	}
	if a.held[ToolReadFile] {
		out = append(out, a.readFileTool())
	}
	for _, t := range out {
		a.offered[t.def.Name] = true
	}
	return out
}

// unusable is the stub of a tool that cannot be used now: calling it
// returns why.
func unusable(name, what, why string) tool {
	return tool{
		def: llm.Tool{
			Name:        name,
			Description: what + " Not usable now (" + why + "); it is listed because earlier messages use it.",
			Schema:      mustSchema(Schema{"type": "object", "properties": Schema{}}),
		},
		run: func(context.Context, *runtime.Client, json.RawMessage) (string, error) {
			return "", errors.New(why)
		},
	}
}

func defs(tools []tool) []llm.Tool {
	out := make([]llm.Tool, len(tools))
	for i, t := range tools {
		out[i] = t.def
	}
	return out
}

// mustSchema encodes a schema built from maps of plain values, which
// cannot fail.
func mustSchema(s Schema) json.RawMessage {
	raw, err := json.Marshal(s)
	if err != nil {
		panic("bcpagent: schema does not encode: " + err.Error())
	}
	return raw
}
