// Command bcp-agent is a bcpgw runtime that drives a real model with the
// BCP tools. The gateway starts it; an agent definition selects it with
//
//	runtime: [bin/bcp-agent]
//	model: openai:gpt-4o-mini        # or anthropic:MODEL
//	env: {OPENAI_API_KEY: ${OPENAI_API_KEY}}
//
// The model is reached through OPENAI_BASE_URL / OPENAI_API_KEY or
// ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY, which the definition's env
// passes through, and through the proxy in HTTPS_PROXY / HTTP_PROXY when
// one is set (inside a sandbox with a network list, the gateway's egress
// proxy). See package internal/bcpagent for what it does.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bcpgw/bcpgw/internal/bcpagent"
	"github.com/bcpgw/bcpgw/runtime"
)

func main() {
	flag.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: bcp-agent

bcp-agent is started by the bcpgw gateway and speaks its wire protocol on
stdin and stdout. The agent definition's model selects the API:
  openai:MODEL      Chat Completions (OpenAI, Ollama, vLLM, llama.cpp)
                    OPENAI_BASE_URL (default https://api.openai.com/v1)
                    OPENAI_API_KEY (may be empty when OPENAI_BASE_URL is set)
  anthropic:MODEL   Messages API
                    ANTHROPIC_BASE_URL (default https://api.anthropic.com)
                    ANTHROPIC_API_KEY
Optional: BCP_AGENT_MAX_TOKENS, BCP_AGENT_USD_PER_MTOK_IN,
BCP_AGENT_USD_PER_MTOK_OUT, BCP_AGENT_WEBFETCH_PRIVATE=1.
HTTPS_PROXY, HTTP_PROXY (either case): the proxy of every request, the
model's and WebFetch's, loopback destinations included (NO_PROXY is not
read); a sandbox with a network list sets them to the gateway's proxy.
`)
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	agent := bcpagent.New(bcpagent.Config{LookupEnv: os.LookupEnv, Log: os.Stderr})
	runtime.Main(agent.Handler())
}
