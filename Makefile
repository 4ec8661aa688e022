# bcpgw: everything a fresh machine with Go needs is fetched by go itself.
GO        ?= go
BIN       := bin
FUZZTIME  ?= 20s
BENCHTIME ?= 1s

# Each fuzz target and its package (go test -fuzz takes one target at a time).
FUZZ_TARGETS := \
	FuzzValidate:./bcp \
	FuzzAnomalyPrefilter:./bcp \
	FuzzParse:./agents \
	FuzzParseTriOnyx:./agents \
	FuzzDecodeQuerySpec:./runtime

.PHONY: all build test fmt-check vet run run-llm fuzz bench clean

all: build

# The commit is stamped into the binaries (bcpgw version) wherever git can
# read this checkout, even if GOFLAGS says -buildvcs=false.
BUILDVCS = $(shell git status --porcelain >/dev/null 2>&1 && echo -buildvcs=auto)

build:
	$(GO) build $(BUILDVCS) -o $(BIN)/ ./cmd/... ./examples/runtimes/...

fmt-check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi

vet:
	$(GO) vet ./...

test: fmt-check vet
	$(GO) test -race -count=1 -timeout=20m ./...

STATE     ?= .bcpgw-state

# The main job on the bundled examples: check them, then run the gateway
# with the demo runtimes (no API key) until Ctrl-C.
run: build
	$(BIN)/bcpgw validate examples/agents
	$(BIN)/bcpgw run --agents examples/agents --state $(STATE)

LLM_STATE ?= .bcpgw-state-llm

# The bcp-agent example pair on a real model: needs OPENAI_API_KEY and
# OPENAI_BASE_URL (see the README, "Running with a real model").
run-llm: build
	$(BIN)/bcpgw validate examples/llm-agents/agents
	$(BIN)/bcpgw run --agents examples/llm-agents/agents --state $(LLM_STATE)

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; pkg=$${t#*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./...

clean:
	rm -rf $(BIN)
