package main

import (
	"flag"
	"strings"

	"github.com/haraqa/haraqa/client"
)

// tlsFlags say how to reach a server that speaks TLS: -tls, -tls-ca,
// -tls-cert, -tls-key and -tls-server-name, each defaulting to its
// environment variable ($HARAQA_TLS, $HARAQA_TLS_CA, ...). Any of them
// turns TLS on.
type tlsFlags struct {
	on                        bool
	ca, cert, key, serverName string
}

// tlsEnv maps each TLS flag to its environment variable.
var tlsEnv = []struct{ flag, env string }{
	{"tls", "HARAQA_TLS"},
	{"tls-ca", "HARAQA_TLS_CA"},
	{"tls-cert", "HARAQA_TLS_CERT"},
	{"tls-key", "HARAQA_TLS_KEY"},
	{"tls-server-name", "HARAQA_TLS_SERVER_NAME"},
}

// fromEnv takes the defaults from the environment.
func (f *tlsFlags) fromEnv(getenv func(string) string) {
	for _, v := range tlsEnv {
		if s := getenv(v.env); s != "" {
			f.set(v.flag, s)
		}
	}
}

// registerTLS defines the TLS flags on fs, for parsing and for the help.
func registerTLS(fs *flag.FlagSet) {
	fs.Bool("tls", false, "speak TLS, trusting the system's roots (default $HARAQA_TLS)")
	fs.String("tls-ca", "", "speak TLS, trusting the CA certificates in this PEM file instead (default $HARAQA_TLS_CA)")
	fs.String("tls-cert", "", "client certificate PEM file, for a server that requires one (default $HARAQA_TLS_CERT)")
	fs.String("tls-key", "", "key PEM file of -tls-cert (default $HARAQA_TLS_KEY)")
	fs.String("tls-server-name", "", "name the server's certificate must carry, when not the host of -addr (default $HARAQA_TLS_SERVER_NAME)")
}

// isTLSFlag reports whether name is one of the TLS flags, and whether it
// takes a value.
func isTLSFlag(name string) (ok, value bool) {
	for _, v := range tlsEnv {
		if v.flag == name {
			return true, name != "tls"
		}
	}
	return false, false
}

// apply takes the TLS flags given on fs's command line.
func (f *tlsFlags) apply(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		if ok, _ := isTLSFlag(fl.Name); ok {
			f.set(fl.Name, fl.Value.String())
		}
	})
}

// set sets the flag name to value. A boolean is false for "", 0, false,
// no and off, whatever the case, and true otherwise.
func (f *tlsFlags) set(name, value string) {
	switch name {
	case "tls":
		switch strings.ToLower(value) {
		case "", "0", "f", "false", "no", "off":
			f.on = false
		default:
			f.on = true
		}
	case "tls-ca":
		f.ca = value
	case "tls-cert":
		f.cert = value
	case "tls-key":
		f.key = value
	case "tls-server-name":
		f.serverName = value
	}
}

// options returns the client option the flags ask for, if any.
func (f *tlsFlags) options() ([]client.Option, error) {
	cfg, err := client.TLSConfigFromFiles(f.ca, f.cert, f.key, f.serverName, f.on)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if cfg == nil {
		return nil, nil
	}
	return []client.Option{client.WithTLS(cfg)}, nil
}
