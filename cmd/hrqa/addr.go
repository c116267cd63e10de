package main

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/haraqa/haraqa/client"
)

// addrSource says where e.addr came from, for a message.
func (e *env) addrSource() string {
	if e.addrFrom == "" {
		return "the default address (no -addr or $HARAQA_ADDR given)"
	}
	return e.addrFrom
}

// checkAddr rejects an address given as a URL (http://host:port): hrqa
// takes HOST:PORT of the binary protocol port, and the net package's
// "too many colons in address" does not say what to change.
func (e *env) checkAddr() error {
	var fixed []string
	bad := false
	for _, a := range strings.Split(e.addr, ",") {
		a = strings.TrimSpace(a)
		if scheme, rest, ok := strings.Cut(a, "://"); ok && !strings.ContainsAny(scheme, ":/") {
			bad = true
			a, _, _ = strings.Cut(rest, "/")
		}
		fixed = append(fixed, a)
	}
	if !bad {
		return nil
	}
	from := e.addrFrom
	if from == "" {
		from = "the address"
	}
	return failf(errors.New("an address with a scheme"), "%s %q is a URL: hrqa takes HOST:PORT of the server's binary protocol port, without a scheme: use %s",
		from, e.addr, strings.Join(fixed, ","))
}

// addrHint is what follows the message of err when the server could not
// be reached: where its address came from, and for the default address
// how to start a server or give another.
func (e *env) addrHint(err error) string {
	var oe *net.OpError
	if !errors.Is(err, client.ErrConnection) || !errors.As(err, &oe) || oe.Op != "dial" {
		return ""
	}
	if e.addrFrom == "" {
		return fmt.Sprintf(" (%s: is a server running there? make run starts one; else give its address with -addr or $HARAQA_ADDR)", e.addrSource())
	}
	return fmt.Sprintf(" (the address from %s)", e.addrSource())
}
