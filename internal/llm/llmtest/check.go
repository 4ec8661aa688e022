package llmtest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// checkAnthropic returns why the Messages API would refuse body with a
// 400, or "" when it would take it. The rules are the ones a tool loop can
// break, with the API's own wording where it has one:
//   - the first message is the user's, and roles alternate;
//   - text blocks are not empty (nor white space only);
//   - the tool_use ids of an assistant message are unique, and the next
//     message is the user's and opens with exactly one tool_result for
//     each of them (tool_result blocks first, text after);
//   - a tool_result answers a tool_use of the message just before it;
//   - a request with tool_use or tool_result blocks defines tools.
func checkAnthropic(body []byte) string {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return "malformed JSON: " + err.Error()
	}
	if len(req.Messages) == 0 {
		return "messages: at least one message is required"
	}
	type block struct {
		Type      string          `json:"type"`
		Text      *string         `json:"text"`
		ID        string          `json:"id"`
		ToolUseID string          `json:"tool_use_id"`
		Input     json.RawMessage `json:"input"`
	}
	toolBlocks := false
	var prevToolUses []string // the tool_use ids of the previous message
	seen := map[string]bool{}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if i == 0 && m.Role != "user" {
			return `messages: first message must use the "user" role`
		}
		if i > 0 && m.Role == req.Messages[i-1].Role {
			return fmt.Sprintf(`messages: roles must alternate between "user" and "assistant", but found multiple %q roles in a row`, m.Role)
		}
		var blocks []block
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			if strings.TrimSpace(text) == "" {
				return fmt.Sprintf("messages.%d: text content blocks must contain non-whitespace text", i)
			}
			blocks = []block{{Type: "text", Text: &text}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return fmt.Sprintf("messages.%d.content: %v", i, err)
		}
		if len(blocks) == 0 {
			return fmt.Sprintf("messages.%d: all messages must have non-empty content", i)
		}
		var uses, results []string
		resultsDone := false
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == nil || strings.TrimSpace(*b.Text) == "" {
					return fmt.Sprintf("messages.%d.content.%d: text content blocks must contain non-whitespace text", i, j)
				}
				resultsDone = true
			case "tool_use":
				toolBlocks = true
				if m.Role != "assistant" {
					return fmt.Sprintf("messages.%d.content.%d: tool_use blocks can only be in assistant messages", i, j)
				}
				if b.ID == "" || seen[b.ID] {
					return fmt.Sprintf("messages.%d.content.%d: `tool_use` ids must be unique (%q)", i, j, b.ID)
				}
				var obj map[string]json.RawMessage
				if json.Unmarshal(b.Input, &obj) != nil || obj == nil {
					return fmt.Sprintf("messages.%d.content.%d.input: Input should be a valid dictionary", i, j)
				}
				seen[b.ID] = true
				uses = append(uses, b.ID)
			case "tool_result":
				toolBlocks = true
				if m.Role != "user" {
					return fmt.Sprintf("messages.%d.content.%d: tool_result blocks can only be in user messages", i, j)
				}
				if resultsDone {
					return fmt.Sprintf("messages.%d: tool_result blocks must come FIRST in the content array of the user message that follows the tool_use", i)
				}
				if !slices.Contains(prevToolUses, b.ToolUseID) || slices.Contains(results, b.ToolUseID) {
					return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				results = append(results, b.ToolUseID)
			default:
				return fmt.Sprintf("messages.%d.content.%d.type: unknown block type %q", i, j, b.Type)
			}
		}
		if missing := without(prevToolUses, results); len(missing) > 0 {
			return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
		}
		prevToolUses = uses
	}
	if len(prevToolUses) > 0 {
		return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", len(req.Messages)-1, strings.Join(prevToolUses, ", "))
	}
	if toolBlocks && len(req.Tools) == 0 {
		return "Requests which include `tool_use` or `tool_result` blocks must define tools."
	}
	return ""
}

// checkOpenAI returns why the Chat Completions API would refuse body
// with a 400, or "" when it would take it:
//   - a tool message answers a tool_call of the assistant message that
//     precedes the run of tool messages it is in;
//   - an assistant message's tool_calls are each answered, once, by the
//     tool messages right after it;
//   - tool_call ids are not repeated in the conversation.
func checkOpenAI(body []byte) string {
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return "malformed JSON: " + err.Error()
	}
	if len(req.Messages) == 0 {
		return "'messages' must contain at least one message"
	}
	seen := map[string]bool{}
	var open []string // calls of the last assistant message not yet answered
	var answered []string
	for i, m := range req.Messages {
		if m.Role != "tool" && len(open) > 0 {
			return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(open, ", "))
		}
		switch m.Role {
		case "system", "developer", "user":
			answered = nil
		case "assistant":
			answered = nil
			for _, tc := range m.ToolCalls {
				if tc.ID == "" || seen[tc.ID] {
					return fmt.Sprintf("Invalid parameter: messages[%d].tool_calls: duplicate or empty id %q", i, tc.ID)
				}
				seen[tc.ID] = true
				open = append(open, tc.ID)
			}
		case "tool":
			if !slices.Contains(open, m.ToolCallID) {
				if slices.Contains(answered, m.ToolCallID) {
					return fmt.Sprintf("Invalid parameter: messages[%d]: duplicate response to tool_call_id %q", i, m.ToolCallID)
				}
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[%d], tool_call_id %q).", i, m.ToolCallID)
			}
			open = without(open, []string{m.ToolCallID})
			answered = append(answered, m.ToolCallID)
		default:
			return fmt.Sprintf("Invalid value for messages[%d].role: %q", i, m.Role)
		}
	}
	if len(open) > 0 {
		return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(open, ", "))
	}
	return ""
}

// without returns the elements of list that are not in drop, in order.
func without(list, drop []string) []string {
	var out []string
	for _, x := range list {
		if !slices.Contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}
