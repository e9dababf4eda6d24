package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/tokentop/tokentop/capture"
	"github.com/tokentop/tokentop/report"
)

// pcapReplay reports whether replay's arguments ask for a packet capture
// (--pcap) rather than a recording.
func pcapReplay(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		return strings.HasPrefix(a, "-") && name == "pcap"
	})
}

// runPcapReplay is `tokentop replay --pcap FILE --port N [--json]`: every
// request to port N in a capture that tcpdump wrote, measured from its
// packets, summarised per endpoint and model.
func runPcapReplay(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("replay --pcap", flag.ContinueOnError)
	path := fs.String("pcap", "", "a capture `FILE` (pcap or pcapng, as tcpdump -w writes)")
	port := fs.Uint("port", 0, "the server's TCP `PORT`: every request to it is measured")
	asJSON := fs.Bool("json", false, "print the summary as JSON ("+capture.SummarySchema+")")
	var rs pcapReportSpec
	fs.StringVar(&rs.reportPath, "report", "", "write the session's report (observed groups, capture) to `PATH` (- for stdout) instead of the summary")
	fs.StringVar(&rs.format, "format", "json", "report format: json or markdown")
	fs.StringVar(&rs.configPath, "config", "", "YAML config `file` whose classes' objectives judge the groups (default: the built-in classes)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tokentop replay --pcap FILE --port N [--json | --report PATH|- [--format json|markdown] [--config FILE]]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, e.Stderr); err != nil {
		return report.ExitUsage, err
	}
	switch {
	case fs.NArg() > 0:
		return report.ExitUsage, usagef("unexpected argument %q", fs.Arg(0))
	case *path == "":
		return report.ExitUsage, usagef("--pcap needs a capture FILE")
	case *port == 0 || *port > 65535:
		return report.ExitUsage, usagef("--port N is required (1–65535), got %d", *port)
	}
	if rs.reportPath != "" {
		if *asJSON {
			return report.ExitUsage, usagef("--json prints the summary, --report the session's report: choose one")
		}
		rs.path, rs.port = *path, uint16(*port)
		return pcapReport(ctx, e, rs)
	}
	var sum capture.Summarizer
	if err := capture.File(*path, capture.Config{Port: uint16(*port)}).Run(ctx, sum.Add); err != nil {
		return report.ExitNoData, err
	}
	s := sum.Summary()
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return report.ExitNoData, err
		}
	} else {
		writeCaptureSummary(e.Stdout, s)
	}
	if s.Stats.Streams == 0 {
		return report.ExitNoData, nil
	}
	return report.ExitOK, nil
}

// writeCaptureSummary prints the summary for a person: the capture's
// account, then a line per group. Every name in it was sanitized where
// it was read.
func writeCaptureSummary(w io.Writer, s capture.Summary) {
	st := s.Stats
	fmt.Fprintf(w, "%d packets, %d connections: %d requests, %d complete, incomplete: %s, not measurable: %s\n",
		st.Packets, st.Connections, st.Streams, st.Complete, counts(st.Incomplete), counts(st.NotMeasurable))
	if st.ConnectionsDropped+st.ReassemblyDrops+st.KernelDrops+st.Undecodable > 0 {
		fmt.Fprintf(w, "dropped: %d connections over the cap, %d out-of-order bytes, %d by the kernel; %d packets not TCP/IP\n",
			st.ConnectionsDropped, st.ReassemblyDrops, st.KernelDrops, st.Undecodable)
	}
	for _, g := range s.Groups {
		fmt.Fprintf(w, "%s: %d requests, %d complete, errors: %s; TTFT p50 %.1f p99 %.1f ms (%d); gap p50 %.1f p99 %.1f ms (%d)\n",
			g.Name, g.Requests, g.Complete, counts(g.Errors), g.TTFTMs.P50, g.TTFTMs.P99, g.TTFTMs.Count, g.GapMs.P50, g.GapMs.P99, g.GapMs.Count)
	}
}

// counts writes reason counts as "reason n, …" in name order, "none"
// when there are none.
func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
