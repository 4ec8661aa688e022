// Command demo-agent is a runtime that needs no model and no API key, for
// trying bcpgw end to end. As a reader it publishes made-up findings and
// alerts to the subscriptions the gateway announces, on a timer; as a
// controller it logs what is delivered to it.
//
//	demo-agent --role reader --interval 20s
//	demo-agent --role controller
//
// It logs to stderr with [LEVEL] prefixes, which the gateway relays.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/runtime"
)

func main() {
	role := flag.String("role", "reader", "reader or controller")
	interval := flag.Duration("interval", 20*time.Second, "reader: time between publishes")
	flag.Parse()
	logger := log.New(os.Stderr, "", 0)

	var h runtime.Handler
	switch *role {
	case "reader":
		h = readerHandler(logger, *interval)
	case "controller":
		h = controllerHandler(logger)
	default:
		fmt.Fprintf(os.Stderr, "demo-agent: --role must be reader or controller, got %q\n", *role)
		os.Exit(2)
	}
	runtime.Main(h)
}

// readerHandler publishes to each announced subscription every interval,
// until the session ends. Each subscription has its own publisher, which
// waits for the gateway's verdict before the next publish: a Cat-3 digest
// waits for an operator's decision without holding up the others.
func readerHandler(logger *log.Logger, interval time.Duration) runtime.Handler {
	return runtime.Handler{
		Start: func(_ context.Context, c *runtime.Client) error {
			logger.Printf("[INFO] reader %s started", c.Agent().Name)
			return nil
		},
		Subscriptions: func(ctx context.Context, c *runtime.Client, subs []runtime.ActiveSubscription) {
			logger.Printf("[INFO] %d subscription(s) announced", len(subs))
			// The publishers live as long as the session: ctx ends with it.
			for i, s := range subs {
				go publishLoop(ctx, logger, c, s, interval, time.Duration(i)*interval/time.Duration(len(subs)))
			}
		},
		Prompt: func(_ context.Context, _ *runtime.Client, p runtime.Prompt) error {
			logger.Printf("[INFO] prompt: %s", p.Content)
			return nil
		},
		Query: func(ctx context.Context, c *runtime.Client, q runtime.Query) error {
			r, err := c.Respond(ctx, q.QueryID, sample(q.Category, q.Fields, q.Questions, 0))
			if err != nil {
				return err
			}
			logger.Printf("[INFO] answered query %s: %s", q.QueryID, r.Detail)
			return nil
		},
	}
}

// publishLoop publishes to s at once and then every interval, after an
// initial offset that spreads the subscriptions over the interval. A
// subscription whose announcement carries a rate limit (max in any
// window) is published to at most once every window/max: the Reader
// paces itself rather than learning the limit from refusals.
func publishLoop(ctx context.Context, logger *log.Logger, c *runtime.Client, s runtime.ActiveSubscription, interval, offset time.Duration) {
	if r := s.RateLimit; r != nil && r.Max > 0 {
		if every := r.Window() / time.Duration(r.Max); every > interval {
			logger.Printf("[INFO] %s allows %d publishes in %s: publishing every %s", s.SubscriptionID, r.Max, r.Window(), every)
			interval = every
		}
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		if s.Category == bcp.Cat3 {
			logger.Printf("[INFO] publishing %s; it waits for an operator's decision", s.SubscriptionID)
		}
		r, err := c.Publish(ctx, s.SubscriptionID, s.Controller, sample(s.Category, s.Fields, s.Questions, n))
		switch {
		case ctx.Err() != nil:
			return // the session is ending
		case err != nil:
			logger.Printf("[WARN] publish %s: %v", s.SubscriptionID, err)
		case r.Success:
			logger.Printf("[INFO] published %s: %s", s.SubscriptionID, r.Detail)
		default:
			logger.Printf("[WARN] publish %s refused: %s", s.SubscriptionID, r.Detail)
		}
	}
}

// sample makes up a response that fits a spec.
func sample(cat bcp.Category, fields []bcp.Field, questions []bcp.Question, n int) map[string]any {
	out := map[string]any{}
	switch cat {
	case bcp.Cat1:
		for _, f := range fields {
			switch f.Type {
			case bcp.Boolean:
				out[f.Name] = n%2 == 0
			case bcp.Enum:
				out[f.Name] = f.Values[n%len(f.Values)]
			case bcp.Integer:
				out[f.Name] = *f.Min
			}
		}
	case bcp.Cat2:
		for _, q := range questions {
			switch q.Format {
			case bcp.IntegerFmt:
				v := int64(1 + n%5)
				if q.Min != nil && v < *q.Min {
					v = *q.Min
				}
				if q.Max != nil && v > *q.Max {
					v = *q.Max
				}
				out[q.ID] = fmt.Sprint(v)
			case bcp.Date:
				out[q.ID] = time.Now().UTC().Format("2006-01-02")
			case bcp.Email:
				out[q.ID] = "desk@news.example"
			case bcp.PersonName:
				out[q.ID] = "Ada Lovelace"
			default:
				out[q.ID] = fmt.Sprintf("Demo finding number %d", n+1)
			}
		}
	case bcp.Cat3:
		out["summary"] = fmt.Sprintf("Demo digest %d: two sources changed, nothing urgent.", n+1)
	}
	return out
}

// controllerHandler logs every delivery.
func controllerHandler(logger *log.Logger) runtime.Handler {
	return runtime.Handler{
		Start: func(_ context.Context, c *runtime.Client) error {
			logger.Printf("[INFO] controller %s started", c.Agent().Name)
			return nil
		},
		Prompt: func(_ context.Context, _ *runtime.Client, p runtime.Prompt) error {
			logger.Printf("[INFO] prompt: %s", p.Content)
			return nil
		},
		Delivery: func(_ context.Context, _ *runtime.Client, d runtime.ResponseDelivery) error {
			id := d.SubscriptionID
			if id == "" {
				id = "query " + d.QueryID
			}
			logger.Printf("[INFO] delivery %s from %s (Cat-%d, %s): %s", id, d.FromAgent, d.Category, bcp.FormatBits(d.BandwidthBits), d.Response)
			return nil
		},
	}
}
