package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// failure is an error with the message hrqa prints for it. Its cause stays
// reachable with errors.Is and errors.As.
type failure struct {
	msg   string
	cause error
}

func (e *failure) Error() string { return e.msg }
func (e *failure) Unwrap() error { return e.cause }

func failf(cause error, format string, args ...any) error {
	return &failure{msg: fmt.Sprintf(format, args...), cause: cause}
}

// explain turns an error of a request about topic into one whose message a
// person reads without knowing the protocol.
func explain(err error, topic string) error {
	var f *failure
	switch {
	case err == nil || errors.As(err, &f):
		return err
	case errors.Is(err, client.ErrTopicNotFound):
		return failf(err, "topic %q does not exist", topic)
	case errors.Is(err, client.ErrTopicExists):
		return failf(err, "topic %q already exists", topic)
	case errors.Is(err, client.ErrInvalidTopic):
		if perr := protocol.ValidTopic(topic); perr != nil {
			// The real reason: "." and ".." are made of allowed characters.
			return failf(err, "invalid topic name %q: %s", topic, strings.TrimPrefix(perr.Error(), protocol.ErrInvalidTopic.Error()+": "))
		}
		return failf(err, "invalid topic name %q: use 1 to 255 characters of A-Z a-z 0-9 . _ - : @", topic)
	case errors.Is(err, client.ErrReadOnly):
		return failf(err, "topic %q is read-only after an I/O error on the server", topic)
	}
	return err
}

// message is the one line printed for a failure, without the "hrqa: "
// prefix. addr is the server's address (-addr), or the list of them; an
// error from one of several servers names that one instead.
func message(err error, addr string) string {
	var sv *client.ServerError
	if errors.As(err, &sv) {
		addr = sv.Addr
	}
	var f *failure
	var se *client.Error
	var oe *net.OpError
	var ve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var msg string
	switch {
	case errors.As(err, &f):
		msg = f.msg
	case errors.As(err, &ve):
		msg = fmt.Sprintf("cannot connect to %s: the server's certificate is not trusted (%v); give the CA that signed it with -tls-ca", addr, ve.Err)
	case errors.Is(err, client.ErrHTTPPort):
		msg = fmt.Sprintf("%s is an HTTP port (the REST API); hrqa speaks the binary protocol: use the server's -tcp port (default 14353)", addr)
	case errors.As(err, &rhe):
		msg = fmt.Sprintf("cannot connect to %s: the server does not speak TLS; leave out the -tls flags", addr)
	case errors.Is(err, client.ErrConnection) && errors.As(err, &oe) && oe.Op == "dial":
		msg = fmt.Sprintf("cannot connect to %s: %v", addr, oe.Err)
	case errors.Is(err, client.ErrConnection) && errors.As(err, &oe):
		msg = fmt.Sprintf("connection to %s failed: %v", addr, oe.Err)
	case errors.Is(err, client.ErrConnection) && errors.Is(err, io.EOF):
		msg = fmt.Sprintf("connection to %s closed by the server", addr)
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("no answer from %s in time", addr)
	case errors.Is(err, client.ErrUnauthenticated) && errors.As(err, &se) && se.Op == protocol.OpHello:
		msg = fmt.Sprintf("%s refused the token: check -token or $HARAQA_TOKEN", addr)
	case errors.Is(err, client.ErrUnauthenticated):
		msg = fmt.Sprintf("%s needs a token: give one with -token or $HARAQA_TOKEN", addr)
	case errors.Is(err, client.ErrForbidden) && errors.As(err, &se):
		msg = fmt.Sprintf("the token may not do this: %s", se.Message)
	case errors.As(err, &se) && se.Op == 0: // about the connection, not a request
		msg = fmt.Sprintf("%s: %s", addr, se.Message)
	case errors.As(err, &se):
		msg = fmt.Sprintf("%s: %s", se.Op, se.Message)
	default:
		msg = err.Error()
	}
	if errors.Is(err, client.ErrUnavailable) && f == nil {
		msg = "the topic is on none of the servers that answered, or belongs on one that did not: " + msg
	}
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(msg) // one line
}

// checkFormat checks a -format flag's value: text or json.
func checkFormat(format string) error {
	if format != "text" && format != "json" {
		return usagef("-format %q: want text or json", format)
	}
	return nil
}
