package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// env is the OS as the program sees it. Everything below run() reads the
// environment, stdio and the terminal through it, so tests can give a
// command its own.
type env struct {
	Stdin      io.Reader
	Stdout     io.Writer
	Stderr     io.Writer
	Getenv     func(string) string
	IsTerminal bool // stdout is an interactive terminal
}

func osEnv() env {
	return env{
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		Getenv:     os.Getenv,
		IsTerminal: term.IsTerminal(int(os.Stdout.Fd())) && term.IsTerminal(int(os.Stdin.Fd())),
	}
}
