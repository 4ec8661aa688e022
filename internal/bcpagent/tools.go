package bcpagent

import (
	"context"
	"encoding/json"

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
// the moment: BCPRespond only while this turn's query is unanswered,
// BCPPublish only once subscriptions were announced. Only tools the
// agent's definition lists are offered; the gateway checks the BCP rights
// again, so a runtime cannot grant itself one.
func (a *Agent) tools() []tool {
	var out []tool
	if a.held[agents.ToolQuery] {
		out = append(out, a.queryTool())
	}
	if a.held[agents.ToolRespond] && a.open != nil {
		out = append(out, a.respondTool(*a.open))
	}
	if a.held[agents.ToolPublish] && len(a.subs) > 0 {
		out = append(out, a.publishTool(a.subs))
	}
	if a.held[ToolWebFetch] {
		out = append(out, a.webFetchTool())
	}
	if a.held[ToolReadFile] {
		out = append(out, a.readFileTool())
	}
	return out
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
