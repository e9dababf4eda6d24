package main

import (
	"fmt"
	"io"
	"os"

	"github.com/tokentop/tokentop/report"
)

func writeReport(stdout io.Writer, path, format string, rep report.Report) error {
	write := report.WriteJSON
	if format != "json" {
		write = report.WriteMarkdown
	}
	if path == "-" {
		if err := write(stdout, rep); err != nil {
			return fmt.Errorf("writing report: %w", err)
		}
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := write(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	return nil
}
