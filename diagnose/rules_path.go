package diagnose

// Rules that compare network paths: a buffering proxy between the direct
// path and the gateway.

import (
	"fmt"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

func directEventsPerRead(c *metrics.ClassStats) float64 {
	for _, p := range c.Paths {
		if p.Path == observe.PathDirect {
			return p.EventsPerRead
		}
	}
	return c.EventsPerRead
}

// proxyBuffering: a proxy that holds bytes delivers SSE events in bursts —
// several events per read, near-zero gaps between them and long gaps between
// bursts — and delays the first token. With a direct path to compare, the
// difference between the two paths is the proxy's doing.
//
// Its evidence is streams and the reads that delivered them: every read is
// a sample of how the path delivers, and a stream that arrives in a few
// large reads says more than many gaps would (a buffered stream has few
// gaps worth the name). Each path compared needs minPathStreams streams.
func proxyBuffering(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	var direct, gw *metrics.PathStats
	for j := range c.Paths {
		switch c.Paths[j].Path {
		case observe.PathDirect:
			direct = &c.Paths[j]
		case observe.PathGateway:
			gw = &c.Paths[j]
		}
	}
	var f Finding
	switch {
	case pathSampled(gw) && pathSampled(direct):
		if gw.EventsPerRead < bufferedEventsPerRead || direct.EventsPerRead > smoothEventsPerRead {
			return Finding{}, false
		}
		f = Finding{
			Confidence: 0.6,
			Summary: fmt.Sprintf("the gateway delivers %s streams in bursts: %.1f events per read vs %.1f direct",
				c.Name, gw.EventsPerRead, direct.EventsPerRead),
			Evidence: []Evidence{
				{Signal: c.Name + ".gateway.events_per_read", Value: gw.EventsPerRead, Threshold: bufferedEventsPerRead},
				{Signal: c.Name + ".direct.events_per_read", Value: direct.EventsPerRead, Threshold: smoothEventsPerRead},
			},
		}
		if gw.TTFT.Count > 0 && direct.TTFT.Count > 0 {
			extra := gw.TTFT.P50 - direct.TTFT.P50
			f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + ".gateway_minus_direct.ttft_p50_ms", Value: extra, Threshold: bufferedExtraTTFTMs, Unit: "ms"})
			if extra >= bufferedExtraTTFTMs {
				f.Confidence += 0.25
				f.Summary += fmt.Sprintf(", first token %.0f ms later", extra)
			}
		}
		if gw.ChunkGap.P50 < burstGapP50Ms {
			f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + ".gateway.gap_p50_ms", Value: gw.ChunkGap.P50, Threshold: burstGapP50Ms, Unit: "ms"})
			f.Confidence += 0.1
		}
	case gw == nil && c.Completed >= minPathStreams && c.ChunkGap.Count > 0:
		// One path only: bursts alone point at something between us and
		// the server holding bytes.
		if c.EventsPerRead < bufferedEventsPerRead || c.ChunkGap.P50 >= burstGapP50Ms {
			return Finding{}, false
		}
		f = Finding{
			Confidence: 0.5,
			Summary: fmt.Sprintf("%s streams arrive in bursts: %.1f events per read, gap p50 %.1f ms, p99 %.0f ms — a proxy or load balancer is buffering",
				c.Name, c.EventsPerRead, c.ChunkGap.P50, c.ChunkGap.P99),
			Evidence: []Evidence{
				{Signal: c.Name + ".events_per_read", Value: c.EventsPerRead, Threshold: bufferedEventsPerRead},
				{Signal: c.Name + ".gap_p50_ms", Value: c.ChunkGap.P50, Threshold: burstGapP50Ms, Unit: "ms"},
			},
		}
	default:
		return Finding{}, false
	}
	f.Severity = SeverityWarning
	if in.failing[c.Name] {
		f.Severity = SeverityCritical
	}
	f.Advice = "Turn off response buffering for the streaming route (nginx: proxy_buffering off, or the X-Accel-Buffering: no response header; gzip off for text/event-stream), and check load balancers for idle/flush settings."
	return f, true
}

// minPathStreams is the fewest streams a path's delivery is judged from:
// one stream could have met one slow flush; two that arrive the same way
// show how the path delivers.
const minPathStreams = 2

// pathSampled: the path carried enough streams, with reads that held
// events, to say how it delivers them.
func pathSampled(p *metrics.PathStats) bool {
	return p != nil && p.Requests >= minPathStreams && p.Reads >= minPathStreams
}
